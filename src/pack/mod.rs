//! Opening a pack: an HF folder (config.json, tokenizer files, safetensors) or a GGUF file.
//! The result is the same either way: a config in HF spelling, tensors under HF names (mapped,
//! not copied), and the vocabulary with its special-token rules.

pub mod chat;
pub mod files;
pub mod gguf;
mod gguf_pack;
pub mod gguf_tokenizer;
pub mod safetensors_files;
pub mod sizes;
pub mod tensor;
pub mod vocab;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;
use tokenizers::Tokenizer;

use crate::error::{Error, Result, Status};
use crate::semantics::config::Cfg;
use crate::semantics::{Container, ModelSpec};
use tensor::WeightTensor;
use files::FileKind;
use vocab::Vocab;

pub struct Pack {
    pub path: PathBuf,
    /// The config in HF spelling (for a GGUF, built from its metadata).
    pub config: Value,
    pub spec: ModelSpec,
    pub tensors: BTreeMap<String, WeightTensor>,
    pub vocab: Vocab,
}

impl Pack {
    pub fn open(path: &Path) -> Result<Pack> {
        if path.is_dir() {
            open_folder(path)
        } else if path.is_file() {
            open_gguf(path)
        } else if files::exists(path) {
            // A FIFO, a device, a socket: never opened (it could block or never end).
            Err(Error::new(Status::ErrIo, format!("{}: not a regular file or a folder", path.display())))
        } else {
            Err(Error::new(Status::ErrIo, format!("{}: no such file or folder", path.display())))
        }
    }
}

fn read_json(path: &Path, kind: FileKind) -> Result<Value> {
    let bytes = files::read_bytes(path, kind)?;
    serde_json::from_slice(&bytes).map_err(|e| Error::format(format!("{}: {e}", path.display())))
}

/// An optional file: absent is None; present but not a readable regular file is an error.
fn read_json_opt(path: &Path, kind: FileKind) -> Result<Option<Value>> {
    if files::exists(path) {
        read_json(path, kind).map(Some)
    } else {
        Ok(None)
    }
}

/// A special token given as a string or as `{"content": ...}` (tokenizer_config.json).
fn token_content(v: Option<&Value>) -> Option<&str> {
    match v? {
        Value::String(s) => Some(s),
        Value::Object(o) => o.get("content")?.as_str(),
        _ => None,
    }
}

fn open_folder(dir: &Path) -> Result<Pack> {
    let config_path = dir.join("config.json");
    let config = read_json(&config_path, FileKind::Config)?;
    let source = config_path.display().to_string();
    // The tensor table first (mapped, not read): the config's sizes are checked against it
    // before the per-layer table is built from them.
    let tensors = safetensors_files::load_folder(dir)?;
    sizes::check_against_tensors(&config, &source, "\"num_hidden_layers\"", &tensors)?;
    let mut spec = ModelSpec::from_config(&config, &source, Container::Folder)?;

    let tok_path = dir.join("tokenizer.json");
    if !files::exists(&tok_path) {
        return Err(Error::new(Status::ErrIo, format!("{}: missing", tok_path.display())));
    }
    let tok_bytes = files::read_bytes(&tok_path, FileKind::Tokenizer)?;
    let tokenizer = Tokenizer::from_bytes(&tok_bytes)
        .map_err(|e| Error::new(Status::ErrTokenizer, format!("{}: {e}", tok_path.display())))?;
    drop(tok_bytes);
    let tc_path = dir.join("tokenizer_config.json");
    let tc = read_json_opt(&tc_path, FileKind::TokenizerConfig)?.unwrap_or(Value::Null);
    let gen = read_json_opt(&dir.join("generation_config.json"), FileKind::GenerationConfig)?.unwrap_or(Value::Null);
    let tc_src = tc_path.display().to_string();
    let gen_src = "generation_config.json".to_string();
    let tcfg = Cfg::new(&tc, &tc_src);
    let gcfg = Cfg::new(&gen, &gen_src);

    // BOS/EOS: config.json, then tokenizer_config.json, then generation_config.json.
    let by_text = |key: &str| token_content(tc.get(key)).and_then(|t| tokenizer.token_to_id(t));
    let bos = spec
        .bos_token_id
        .or_else(|| by_text("bos_token"))
        .or(gcfg.token_ids("bos_token_id")?.first().copied());
    let mut eos = spec.eos_token_ids.clone();
    if eos.is_empty() {
        eos.extend(by_text("eos_token"));
    }
    if eos.is_empty() {
        eos = gcfg.token_ids("eos_token_id")?;
    }
    // generation_config's eos list (it may name several) are stop tokens either way.
    let extra_stop = gcfg.token_ids("eos_token_id")?;
    let add_bos = match tcfg.opt_bool("add_bos_token")? {
        Some(b) => b,
        None => post_processor_adds(&tokenizer, bos),
    };
    let template = chat::template_from_folder(dir, &tc)?;
    check_token_ids(&spec, bos, &eos, &extra_stop, &dir.display().to_string())?;
    spec.bos_token_id = bos;
    spec.eos_token_ids = eos.clone();
    let vocab = Vocab::new(tokenizer, bos, eos, extra_stop, add_bos, template);
    Ok(Pack { path: dir.to_path_buf(), config, spec, tensors, vocab })
}

/// BOS, EOS and stop ids must name rows of the embedding (`vocab_size`): an id beyond it would be
/// reported as valid and could never be stepped.
fn check_token_ids(spec: &ModelSpec, bos: Option<u32>, eos: &[u32], stop: &[u32], source: &str) -> Result<()> {
    let ids = bos.iter().map(|&b| ("bos_token_id", b)).chain(eos.iter().chain(stop).map(|&e| ("eos_token_id", e)));
    for (key, id) in ids {
        if id as usize >= spec.vocab_size {
            return Err(Error::format(format!(
                "{source}: {key} {id} is not below the vocabulary size {}",
                spec.vocab_size
            )));
        }
    }
    Ok(())
}

/// Whether the tokenizer.json's own post-processor puts BOS first (used when
/// tokenizer_config.json does not say `add_bos_token`).
fn post_processor_adds(tokenizer: &Tokenizer, bos: Option<u32>) -> bool {
    match (bos, tokenizer.encode("a", true)) {
        (Some(b), Ok(enc)) => enc.get_ids().first() == Some(&b),
        _ => false,
    }
}

fn open_gguf(path: &Path) -> Result<Pack> {
    let g = gguf::GgufFile::open(path)?;
    let gv = gguf_tokenizer::vocab_from_gguf(&g)?;
    let n_tokens = gv.tokenizer.get_vocab_size(true);
    let config = gguf_pack::config_from_gguf(&g, n_tokens)?;
    let source = format!("{} (metadata)", path.display());
    let tensors = gguf_pack::tensors_from_gguf(&g, &config)?;
    let layer_key = format!("{}.block_count", g.architecture()?);
    sizes::check_against_tensors(&config, &source, &layer_key, &tensors)?;
    let mut spec = ModelSpec::from_config(&config, &source, Container::Gguf)?;
    let eos: Vec<u32> = gv.eos.into_iter().collect();
    let eot: Vec<u32> = gv.eot.into_iter().collect();
    check_token_ids(&spec, gv.bos, &eos, &eot, &source)?;
    spec.bos_token_id = gv.bos;
    spec.eos_token_ids = eos.clone();
    let vocab = Vocab::new(gv.tokenizer, gv.bos, eos, eot, gv.add_bos, gv.chat_template);
    Ok(Pack { path: path.to_path_buf(), config, spec, tensors, vocab })
}
