//! Opening a pack: an HF folder (config.json, tokenizer files, safetensors) or a GGUF file.
//! The result is the same either way: a config in HF spelling, tensors under HF names (mapped,
//! not copied), and the vocabulary with its special-token rules.

pub mod chat;
mod chat_calls;
mod chat_compile;
mod chat_guard;
pub mod decode_stream;
pub mod embedding;
pub mod files;
pub mod gguf;
pub mod gguf_bpe;
pub(crate) mod gguf_pack;
pub mod gguf_tokenizer;
mod gguf_value;
pub mod safetensors_files;
pub mod sizes;
pub mod tensor;
mod token_texts;
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
use vocab::{PackTokenizer, Vocab};

pub struct Pack {
    pub path: PathBuf,
    /// The config in HF spelling (for a GGUF, built from its metadata).
    pub config: Value,
    pub spec: ModelSpec,
    pub tensors: BTreeMap<String, WeightTensor>,
    pub vocab: Vocab,
    /// Metadata as (key, text) pairs: a GGUF's own key/values (arrays left out, as llama.cpp's
    /// `llama_model_meta_*` does), or for an HF folder the facts a llama.cpp-style client asks
    /// for (see [`folder_metadata`]).
    pub metadata: Vec<(String, String)>,
    /// The pooling, normalization and Dense layers of its embeddings (embedding.rs).
    pub embedding: embedding::EmbedConfig,
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
    let tensors = family_names(&config, base_model_names(safetensors_files::load_folder(dir)?), dir)?;
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
    let add_eos = match tcfg.opt_bool("add_eos_token")? {
        Some(true) => eos.first().copied(),
        Some(false) => None,
        None => post_processor_appends(&tokenizer),
    };
    let vocab = Vocab::new(PackTokenizer::Json(tokenizer), bos, eos, extra_stop, add_bos, template).with_add_eos(add_eos);
    let metadata = folder_metadata(&spec, &vocab);
    let embedding = embedding::EmbedConfig::from_folder(dir)?;
    Ok(Pack { path: dir.to_path_buf(), config, spec, tensors, vocab, metadata, embedding })
}

/// A base model's save (`Gemma3TextModel`, `Qwen3Model`: what embedding checkpoints such as
/// EmbeddingGemma and Qwen3-Embedding hold) names its tensors without the `model.` prefix of
/// a `*ForCausalLM` save (`layers.0.self_attn.q_proj.weight`, `embed_tokens.weight`,
/// `norm.weight`); those names get the prefix, so one table of names serves both. A table with
/// any `model.` name is left as it is.
fn base_model_names(tensors: std::collections::BTreeMap<String, WeightTensor>) -> std::collections::BTreeMap<String, WeightTensor> {
    if tensors.keys().any(|k| k.starts_with("model.")) || !tensors.contains_key("embed_tokens.weight") {
        return tensors;
    }
    tensors
        .into_iter()
        .map(|(k, mut t)| {
            let k = if k == "lm_head.weight" { k } else { format!("model.{k}") };
            t.name = k.clone();
            (k, t)
        })
        .collect()
}

/// The tensor names a family's checkpoints spell their own way, renamed by its descriptor's
/// `folder_tensor_name`, then its `folder_tensors` (fused tensors split). A config whose model_type names no family keeps its names (the spec
/// rule refuses it with the reason).
fn family_names(config: &Value, tensors: BTreeMap<String, WeightTensor>, dir: &Path) -> Result<BTreeMap<String, WeightTensor>> {
    let family = config.get("model_type").and_then(Value::as_str).and_then(crate::semantics::families::by_model_type);
    let tensors = match family.and_then(|f| f.folder_tensor_name) {
        Some(rename) => rename_tensors(tensors, rename, dir)?,
        None => tensors,
    };
    match family.and_then(|f| f.folder_tensors) {
        Some(transform) => transform(tensors).map_err(|e| Error::new(e.status, format!("{}: {}", dir.display(), e.message))),
        None => Ok(tensors),
    }
}

/// Each tensor under `rename(name)`, or its own name where that is None. Two tensors that end
/// up with one name are refused: neither may silently replace the other.
fn rename_tensors(tensors: BTreeMap<String, WeightTensor>, rename: fn(&str) -> Option<String>, dir: &Path) -> Result<BTreeMap<String, WeightTensor>> {
    let mut out = BTreeMap::new();
    for (k, mut t) in tensors {
        let k = rename(&k).unwrap_or(k);
        t.name = k.clone();
        if out.insert(k.clone(), t).is_some() {
            return Err(Error::tensor(format!("{}: two tensors are named {k} once renamed", dir.display())));
        }
    }
    Ok(out)
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

/// The special token the tokenizer's post-processor appends after a text, if any (Qwen3-
/// Embedding's `$A <|endoftext|>`, EmbeddingGemma's `<bos> $A <eos>`).
fn post_processor_appends(tokenizer: &Tokenizer) -> Option<u32> {
    let with = tokenizer.encode("a", true).ok()?;
    let plain = tokenizer.encode("a", false).ok()?;
    let (w, p) = (with.get_ids(), plain.get_ids());
    let last = *w.last()?;
    let special = tokenizer.get_added_vocabulary().get_added_tokens_decoder().get(&last).is_some_and(|t| t.special);
    (w.len() > p.len() && w.ends_with(&[last]) && p.last() != Some(&last) && special).then_some(last)
}

/// A GGUF's vocabulary alone, as a model opened from it has it: for files that hold only a
/// tokenizer (the tests' and fuzz targets' vocabulary fixtures).
pub fn gguf_vocab(path: &Path) -> Result<Vocab> {
    let g = gguf::GgufFile::open(path)?;
    let gv = gguf_tokenizer::vocab_from_gguf(&g)?;
    let tokenizer = PackTokenizer::Gguf { tokenizer: gv.tokenizer, vocab_size: gv.vocab_size };
    let add_eos = if gv.add_eos { gv.eos } else { None };
    Ok(Vocab::new(tokenizer, gv.bos, gv.eos.into_iter().collect(), gv.eot.into_iter().collect(), gv.add_bos, gv.chat_template).with_add_eos(add_eos).with_suppress(gv.suppress))
}

fn open_gguf(path: &Path) -> Result<Pack> {
    let g = gguf::GgufFile::open(path)?;
    let gv = gguf_tokenizer::vocab_from_gguf(&g)?;
    let n_tokens = gv.vocab_size;
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
    let tokenizer = PackTokenizer::Gguf { tokenizer: gv.tokenizer, vocab_size: gv.vocab_size };
    let add_eos = if gv.add_eos { eos.first().copied() } else { None };
    let vocab = Vocab::new(tokenizer, gv.bos, eos, eot, gv.add_bos, gv.chat_template).with_add_eos(add_eos).with_suppress(gv.suppress);
    let metadata = gguf_metadata(&g);
    let pooling_key = format!("{}.pooling_type", g.architecture()?);
    let embedding = embedding::EmbedConfig::from_gguf(&pooling_key, g.get_u64(&pooling_key)?);
    Ok(Pack { path: path.to_path_buf(), config, spec, tensors, vocab, metadata, embedding })
}

/// A GGUF's non-array key/values as text, in key order: strings as they are, integers in
/// decimal, floats with six decimals (C++ `std::to_string`, as llama.cpp's `gguf_kv_to_str`),
/// booleans as true/false.
pub(crate) fn gguf_metadata(g: &gguf::GgufFile) -> Vec<(String, String)> {
    use gguf::GgufValue as V;
    g.metadata
        .iter()
        .filter_map(|(k, v)| {
            let text = match v {
                V::Array(_) | V::Packed(_) => return None,
                V::Str(s) => s.clone(),
                V::Bool(b) => b.to_string(),
                V::F32(x) => format!("{x:.6}"),
                V::F64(x) => format!("{x:.6}"),
                other => other.as_integer()?.to_string(),
            };
            Some((k.clone(), text))
        })
        .collect()
}

/// What an HF folder states in GGUF's spelling: `general.architecture` (the family's GGUF
/// architecture: "gemma3" for model_type "gemma3_text"), `<arch>.context_length`,
/// `<arch>.block_count`, `<arch>.embedding_length`, and `tokenizer.chat_template` when the
/// pack has one.
fn folder_metadata(spec: &ModelSpec, vocab: &Vocab) -> Vec<(String, String)> {
    let arch = crate::semantics::families::by_model_type(&spec.family).map_or(spec.family.as_str(), |f| f.gguf_arch).to_string();
    let mut meta = vec![
        ("general.architecture".to_string(), arch.clone()),
        (format!("{arch}.block_count"), spec.layers.len().to_string()),
        (format!("{arch}.context_length"), spec.max_context.to_string()),
        (format!("{arch}.embedding_length"), spec.hidden_size.to_string()),
    ];
    // A mixture's counts under llama.cpp's keys (llama_model_meta_val_str "<arch>.expert_count").
    if let Some(m) = spec.layers.iter().find_map(|l| l.moe) {
        meta.push((format!("{arch}.expert_count"), m.n_experts.to_string()));
        meta.push((format!("{arch}.expert_used_count"), m.top_k.to_string()));
    }
    if let Some(t) = &vocab.chat_template {
        meta.push(("tokenizer.chat_template".to_string(), t.clone()));
    }
    meta
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use tensor::TensorBytes;

    fn table(names: &[&str]) -> BTreeMap<String, WeightTensor> {
        let t = |n: &str| WeightTensor::new(n.to_string(), crate::quant::WeightType::F32, vec![1], TensorBytes::Owned(Arc::new(vec![0; 4]))).unwrap();
        names.iter().map(|n| (n.to_string(), t(n))).collect()
    }

    fn w1_to_gate(name: &str) -> Option<String> {
        name.strip_suffix(".w1.weight").map(|stem| format!("{stem}.gate_proj.weight"))
    }

    #[test]
    fn renamed_tensors_carry_their_new_name() {
        let out = rename_tensors(table(&["model.layers.0.e.w1.weight", "model.norm.weight"]), w1_to_gate, Path::new("m")).unwrap();
        assert!(out.iter().all(|(k, t)| *k == t.name));
        let names: Vec<&str> = out.keys().map(String::as_str).collect();
        assert_eq!(names, ["model.layers.0.e.gate_proj.weight", "model.norm.weight"]);
    }

    #[test]
    fn two_tensors_renamed_to_one_name_are_refused() {
        let Err(e) = rename_tensors(table(&["model.layers.0.e.w1.weight", "model.layers.0.e.gate_proj.weight"]), w1_to_gate, Path::new("m")) else {
            panic!("two tensors named model.layers.0.e.gate_proj.weight were accepted");
        };
        assert!(e.message.contains("model.layers.0.e.gate_proj.weight"), "{e}");
    }
}
