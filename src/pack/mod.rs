//! Opening a pack: an HF folder (config.json, tokenizer files, safetensors) or a GGUF file.
//! The result is the same either way: a config in HF spelling, tensors under HF names (mapped,
//! not copied), and the vocabulary with its special-token rules.

pub mod chat;
pub mod gguf;
mod gguf_pack;
pub mod gguf_tokenizer;
mod safetensors_files;
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
        } else {
            Err(Error::new(Status::ErrIo, format!("{}: no such file or folder", path.display())))
        }
    }
}

fn read_json(path: &Path) -> Result<Value> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
    serde_json::from_str(&text).map_err(|e| Error::format(format!("{}: {e}", path.display())))
}

fn read_json_opt(path: &Path) -> Result<Option<Value>> {
    if path.is_file() {
        read_json(path).map(Some)
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
    let config = read_json(&config_path)?;
    let source = config_path.display().to_string();
    let mut spec = ModelSpec::from_config(&config, &source, Container::Folder)?;

    let tok_path = dir.join("tokenizer.json");
    if !tok_path.is_file() {
        return Err(Error::new(Status::ErrIo, format!("{}: missing", tok_path.display())));
    }
    let tokenizer = Tokenizer::from_file(&tok_path)
        .map_err(|e| Error::new(Status::ErrTokenizer, format!("{}: {e}", tok_path.display())))?;
    let tc_path = dir.join("tokenizer_config.json");
    let tc = read_json_opt(&tc_path)?.unwrap_or(Value::Null);
    let gen = read_json_opt(&dir.join("generation_config.json"))?.unwrap_or(Value::Null);
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
    spec.bos_token_id = bos;
    spec.eos_token_ids = eos.clone();
    let vocab = Vocab::new(tokenizer, bos, eos, extra_stop, add_bos, template);
    let tensors = safetensors_files::load_folder(dir)?;
    Ok(Pack { path: dir.to_path_buf(), config, spec, tensors, vocab })
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
    let mut spec = ModelSpec::from_config(&config, &source, Container::Gguf)?;
    let tensors = gguf_pack::tensors_from_gguf(&g, &config)?;
    let eos: Vec<u32> = gv.eos.into_iter().collect();
    spec.bos_token_id = gv.bos;
    spec.eos_token_ids = eos.clone();
    let vocab = Vocab::new(gv.tokenizer, gv.bos, eos, gv.eot.into_iter().collect(), gv.add_bos, gv.chat_template);
    Ok(Pack { path: path.to_path_buf(), config, spec, tensors, vocab })
}
