//! Model families, one descriptor each. A `Family` holds everything packlm knows about one
//! family: the HF `model_type`s it serves, the GGUF architecture its files name and how a GGUF
//! of it is read (config keys the metadata does not carry, tensor names, row order, tokenizer
//! builder), and its rule from config keys to the per-layer table. The generic code (building
//! the table, reading GGUF files, an HF folder's metadata and tensor names) looks a family up
//! here and never names one.
//!
//! A new family is one file beside these, declared below and listed in `ALL`. Rules shared by
//! several families (`base`, the Llama-like builder, the sliding rules) live in `common.rs`.
//! Sources: transformers 5 `models/<family>/configuration_<family>.py` and `modeling_<family>.py`
//! for the rules; llama.cpp's convert_hf_to_gguf.py and gguf-py for GGUF files.

mod common;
mod gemma;
mod gemma4;
mod gpt_oss;
mod llama;
mod mistral;
mod mixtral;
mod qwen2;
mod qwen2_moe;
mod qwen3;
mod qwen3_moe;

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::error::Result;
use crate::pack::gguf_pack::ArchKeys;
use crate::pack::tensor::WeightTensor;
use crate::semantics::config::Cfg;
use crate::semantics::{Container, ModelSpec};

/// One model family: every fact the generic code needs to open and run it.
pub(crate) struct Family {
    /// The HF `model_type` values (config.json) this family's rule serves.
    pub model_types: &'static [&'static str],
    /// The `general.architecture` a GGUF file of this family is recognised by, and the one an
    /// HF folder of it reports in GGUF spelling (Gemma 3's "gemma3" for model_type
    /// "gemma3_text").
    pub gguf_arch: &'static str,
    /// How a GGUF file whose architecture is `gguf_arch` is read; None where packlm reads no
    /// GGUF of this family.
    pub gguf: Option<GgufRead>,
    /// Config -> per-layer table, given the config's `model_type` (one of `model_types`) and
    /// the container it came from.
    pub rule: fn(Cfg, &str, Container) -> Result<ModelSpec>,
    /// An HF folder's tensor name -> the name the engine reads (`model.layers.N.mlp.gate` for a
    /// checkpoint that spells it otherwise), or None to keep it; applied to every tensor of a
    /// folder once the `model.` prefix is settled. None where the family's checkpoints use the
    /// common names.
    pub folder_tensor_name: Option<fn(&str) -> Option<String>>,
    /// An HF folder's whole tensor table (after `folder_tensor_name`) -> the table the engine
    /// reads, for checkpoints that fuse or lay out tensors otherwise (gpt-oss's fused experts).
    pub folder_tensors: Option<fn(BTreeMap<String, WeightTensor>) -> Result<BTreeMap<String, WeightTensor>>>,
}

/// How a GGUF file of a family is read.
pub(crate) struct GgufRead {
    /// The HF `model_type` the file's config is built as.
    pub model_type: &'static str,
    /// Adds what the family's config needs beyond the generic keys (`config_from_gguf`): the
    /// keys a GGUF does not carry take the config class's defaults, as HF's GGUF loader does.
    pub config: fn(&ArchKeys, &mut Map<String, Value>) -> Result<()>,
    /// GGUF tensor stems (`blk.N.<stem>.weight`) -> HF names (`model.layers.N.<name>.weight`)
    /// that differ from or add to the generic table (gguf_pack.rs `hf_name`); looked up first.
    pub tensor_names: &'static [(&'static str, &'static str)],
    /// llama.cpp's converter permuted the rows of `attn_q` / `attn_k` so that ggml's
    /// interleaved rope applies (LlamaModel.permute); they are put back into HF order.
    pub rope_permuted: bool,
    /// The tokenizer HF builds for a SentencePiece vocabulary of this architecture.
    pub spm_tokenizer: SpmTokenizer,
    /// Tensors the `config` hook reads into the config (llama.cpp's `rope_freqs.weight`); they
    /// are not weights.
    pub config_tensors: &'static [&'static str],
}

impl Family {
    /// A family read from HF folders only, under the common tensor names; a descriptor that
    /// reads GGUF files or renames a folder's tensors states that over it
    /// (`Family { gguf: Some(...), ..Family::new(...) }`).
    pub const fn new(model_types: &'static [&'static str], gguf_arch: &'static str, rule: fn(Cfg, &str, Container) -> Result<ModelSpec>) -> Family {
        Family { model_types, gguf_arch, gguf: None, rule, folder_tensor_name: None, folder_tensors: None }
    }
}

impl GgufRead {
    /// A file as llama.cpp's converter writes most families: the common tensor names, rows in
    /// HF order, HF's Llama tokenizer.
    pub const fn plain(model_type: &'static str, config: fn(&ArchKeys, &mut Map<String, Value>) -> Result<()>) -> GgufRead {
        GgufRead { model_type, config, tensor_names: &[], rope_permuted: false, spm_tokenizer: SpmTokenizer::Llama, config_tensors: &[] }
    }
}

/// HF `select_tokenizer_builder` (transformers integrations/ggml.py): the builder a
/// SentencePiece ("llama") GGUF vocabulary gets, by architecture, each with its tokenizer
/// class's default special tokens (gguf_tokenizer.rs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SpmTokenizer {
    /// `llama_tokenizer` / LlamaTokenizer: every architecture not named otherwise.
    Llama,
    /// `gemma_tokenizer` / GemmaTokenizer.
    Gemma,
    /// `phi3_tokenizer`.
    Phi3,
}

/// Every family packlm implements, in the order refusals list them.
pub(crate) static ALL: &[&Family] = &[
    &llama::LLAMA,
    &mistral::MISTRAL,
    &qwen2::QWEN2,
    &qwen3::QWEN3,
    &qwen3_moe::QWEN3_MOE,
    &qwen2_moe::QWEN2_MOE,
    &mixtral::MIXTRAL,
    &gemma::GEMMA,
    &gemma::GEMMA2,
    &gemma::GEMMA3,
    &gemma4::GEMMA4,
    &gpt_oss::GPT_OSS,
];

/// GGUF architectures whose vocabulary packlm rebuilds though it runs no model of them (a
/// vocabulary-only file), with HF's builder for each.
const TOKENIZER_ONLY: &[(&str, SpmTokenizer)] = &[("phi3", SpmTokenizer::Phi3)];

/// The family whose rule serves config.json's `model_type`.
pub(crate) fn by_model_type(model_type: &str) -> Option<&'static Family> {
    ALL.iter().copied().find(|f| f.model_types.contains(&model_type))
}

/// The family whose GGUF architecture (`general.architecture`) is `arch`.
pub(crate) fn by_gguf_arch(arch: &str) -> Option<&'static Family> {
    ALL.iter().copied().find(|f| f.gguf_arch == arch)
}

/// How a GGUF file of architecture `arch` is read, when packlm reads it.
pub(crate) fn gguf_read(arch: &str) -> Option<&'static GgufRead> {
    by_gguf_arch(arch)?.gguf.as_ref()
}

/// The implemented model types, for a refusal: "llama, mistral, ...".
pub(crate) fn model_types() -> String {
    ALL.iter().flat_map(|f| f.model_types.iter().copied()).collect::<Vec<_>>().join(", ")
}

/// The GGUF architectures packlm reads, for a refusal.
pub(crate) fn gguf_archs() -> String {
    ALL.iter().filter(|f| f.gguf.is_some()).map(|f| f.gguf_arch).collect::<Vec<_>>().join(", ")
}

/// The SentencePiece tokenizer builder of GGUF architecture `arch`.
pub(crate) fn spm_tokenizer(arch: &str) -> SpmTokenizer {
    match gguf_read(arch) {
        Some(g) => g.spm_tokenizer,
        None => TOKENIZER_ONLY.iter().find(|(a, _)| *a == arch).map_or(SpmTokenizer::Llama, |&(_, t)| t),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each model type and each GGUF architecture names one family, so a lookup never depends on
    /// the order of `ALL`.
    #[test]
    fn names_are_unique() {
        let types: Vec<&str> = ALL.iter().flat_map(|f| f.model_types.iter().copied()).collect();
        let archs: Vec<&str> = ALL.iter().map(|f| f.gguf_arch).collect();
        for names in [types, archs] {
            let mut sorted = names.clone();
            sorted.sort_unstable();
            sorted.dedup();
            assert_eq!(sorted.len(), names.len(), "{names:?}");
        }
    }

    /// A GGUF file is read as a model type of its own family.
    #[test]
    fn gguf_model_types_belong_to_their_family() {
        for f in ALL {
            if let Some(g) = &f.gguf {
                assert!(f.model_types.contains(&g.model_type), "{}: {}", f.gguf_arch, g.model_type);
            }
        }
    }

    #[test]
    fn lookups() {
        assert_eq!(by_model_type("gemma3_text").map(|f| f.gguf_arch), Some("gemma3"));
        assert_eq!(gguf_read("gemma3").map(|g| g.model_type), Some("gemma3_text"));
        assert!(gguf_read("mistral").is_none());
        assert_eq!(gguf_read("gemma4").map(|g| g.model_type), Some("gemma4_text"));
        assert_eq!(spm_tokenizer("gemma2"), SpmTokenizer::Gemma);
        assert_eq!(spm_tokenizer("phi3"), SpmTokenizer::Phi3);
        assert_eq!(spm_tokenizer("qwen2"), SpmTokenizer::Llama);
        assert_eq!(gguf_archs(), "llama, qwen2, qwen3, qwen3moe, qwen2moe, gemma, gemma2, gemma3, gemma4, gpt-oss");
        assert_eq!(gguf_read("qwen3moe").map(|g| g.model_type), Some("qwen3_moe"));
    }

    /// The refusal of an unknown model_type lists every implemented one, from `ALL`.
    #[test]
    fn an_unknown_model_type_is_refused_naming_the_implemented_ones() {
        let v = serde_json::json!({"model_type": "mamba"});
        let e = crate::semantics::build_spec(Cfg::new(&v, "config.json"), Container::Folder).unwrap_err();
        assert_eq!(e.status, crate::Status::ErrUnsupported, "{e}");
        assert_eq!(
            e.message,
            "config.json: model_type \"mamba\" is not implemented (llama, mistral, qwen2, qwen3, qwen3_moe, qwen2_moe, mixtral, gemma, gemma2, gemma3, gemma3_text, gemma4, gemma4_text, gpt_oss are)"
        );
    }
}
