//! Mixtures of experts against HF transformers goldens (tests/fixtures/make_moe_fixtures.py):
//! tiny random Qwen3-MoE (8 experts, top 2, renormalized; and a variant with a dense layer and
//! raw softmax weights) and Mixtral models, from their HF folders and from the same weights
//! written to GGUF the way llama.cpp lays them out (stacked experts). Also: a pass reads each
//! expert once, for all the rows routed to it, and only the experts HF's router chose.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use common::*;
use packlm::backend::watched::{Call, Watch, Watched};
use packlm::backend::{self, BackendKind, Precision};
use packlm::engine::{Model, Session, Want};
use packlm::pack::tensor::WeightTensor;

const FOLDERS: &[&str] = &["qwen3_moe", "qwen3_moe_dense", "qwen2_moe", "mixtral", "gpt_oss", "gpt_oss_mxfp4"];
const GGUFS: &[&str] = &["qwen3_moe", "qwen2_moe", "mixtral", "gpt_oss"];

fn gguf(name: &str) -> PathBuf {
    tiny(name).join("model.gguf")
}

/// The GGUF's logits against the golden of the folder it was written from.
fn assert_gguf_matches_golden(name: &str, backend: BackendKind) {
    let g = golden(&tiny(name));
    let got = all_rows(&open_with(&gguf(name), backend, 2), &g.tokens);
    let d = max_abs_diff(&got, &g.logits);
    eprintln!("{name} GGUF ({backend:?}): max |packlm - HF| = {d:e}");
    assert!(d <= TOL_F32, "{name} GGUF ({backend:?}): max |packlm - HF| = {d} > {TOL_F32}");
}

#[test]
fn mixtures_match_hf_from_folders() {
    for f in FOLDERS {
        assert_matches_golden(f, BackendKind::Host);
        assert_matches_golden(f, BackendKind::Reference);
    }
}

#[test]
fn mixtures_match_hf_from_gguf() {
    for f in GGUFS {
        assert_gguf_matches_golden(f, BackendKind::Host);
        assert_gguf_matches_golden(f, BackendKind::Reference);
    }
}

/// The GGUF's stacked experts and the folder's separate ones give the same bits.
#[test]
fn stacked_and_separate_experts_give_the_same_bits() {
    for f in GGUFS {
        let tokens = golden(&tiny(f)).tokens;
        assert_bits_equal(&all_rows(&open(&gguf(f)), &tokens), &all_rows(&open(&tiny(f)), &tokens), &format!("{f}: GGUF vs folder"));
    }
}

#[test]
fn mixtures_step_batch_equals_steps_and_threads_agree() {
    for f in FOLDERS {
        let dir = tiny(f);
        let tokens = golden(&dir).tokens;
        for precision in [Precision::Exact, Precision::Fast] {
            let at = |threads| Arc::new(Model::open(&dir, &packlm::engine::OpenOptions::new(BackendKind::Host, threads, precision)).unwrap());
            let one = at(1);
            let batched = all_rows(&one, &tokens);
            assert_bits_equal(&batched, &stepped(&one, &tokens), &format!("{f} {precision:?}: batched vs stepped"));
            for threads in [2, 3] {
                assert_bits_equal(&all_rows(&at(threads), &tokens), &batched, &format!("{f} {precision:?}: {threads} threads vs 1"));
            }
        }
    }
}

/// Counts the products with each prepared matrix, by the matrix's name.
#[derive(Default)]
struct Reads {
    names: Mutex<Vec<String>>,
    counts: Mutex<BTreeMap<String, usize>>,
}

/// The watch that fills a `Reads`.
struct Counter(Arc<Reads>);

impl Watch for Counter {
    fn matrix(&self, w: &WeightTensor) -> usize {
        let mut names = self.0.names.lock().unwrap();
        names.push(w.name.clone());
        names.len() - 1
    }
    fn around(&self, call: Call, run: &mut dyn FnMut()) {
        if let Call::Matrix { id, .. } = call {
            let name = self.0.names.lock().unwrap()[id].clone();
            *self.0.counts.lock().unwrap().entry(name).or_default() += 1;
        }
        run();
    }
}

/// (layer, expert) of an expert matrix's name, in either spelling: `model.layers.L.mlp.experts.E.
/// gate_proj.weight` (a folder) or `model.layers.L.mlp.experts.gate_proj.weight[E]` (a GGUF stack).
fn expert_of(name: &str) -> Option<(usize, usize)> {
    let rest = name.strip_prefix("model.layers.")?;
    let (layer, rest) = rest.split_once('.')?;
    let rest = rest.strip_prefix("mlp.experts.")?;
    let expert = match rest.split_once('[') {
        Some((_, e)) => e.trim_end_matches(']'),
        None => rest.split('.').next()?,
    };
    Some((layer.parse().ok()?, expert.parse().ok()?))
}

/// One pass over the fixture's tokens reads each expert's three matrices once, and exactly the
/// experts that HF's router chose for some row in that layer (golden.json "experts", recorded
/// by the fixture script from HF's own router): every row of an expert in one product.
#[test]
fn a_pass_reads_each_chosen_expert_once() {
    for (f, path) in [
        ("qwen3_moe", tiny("qwen3_moe")),
        ("qwen3_moe", gguf("qwen3_moe")),
        ("mixtral", gguf("mixtral")),
        ("qwen3_moe_dense", tiny("qwen3_moe_dense")),
        ("qwen2_moe", gguf("qwen2_moe")),
        ("gpt_oss", tiny("gpt_oss")),
        ("gpt_oss", gguf("gpt_oss")),
        ("gpt_oss_mxfp4", tiny("gpt_oss_mxfp4")),
    ] {
        let j = fixture_json(&format!("tiny/{f}/golden.json"));
        let tokens = ids(&j["tokens"]);
        let reads = Arc::new(Reads::default());
        let be = Watched { inner: backend::create(BackendKind::Host, 2, Precision::Exact).unwrap(), watcher: Counter(reads.clone()) };
        let m = Arc::new(Model::open_on(Path::new(&path), Box::new(be)).unwrap());
        reads.counts.lock().unwrap().clear();
        Session::new(m, 0).unwrap().step_batch(&tokens, Want::All).unwrap();
        let mut seen: BTreeMap<(usize, usize), usize> = BTreeMap::new();
        for (name, n) in reads.counts.lock().unwrap().iter() {
            if let Some(key) = expert_of(name) {
                assert_eq!(*n, 1, "{f} ({}): {name} read {n} times in one pass", path.display());
                *seen.entry(key).or_default() += 1;
            }
        }
        let sparse: Vec<usize> = j["sparse_layers"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as usize).collect();
        let mut want: BTreeMap<(usize, usize), usize> = BTreeMap::new();
        for (l, per_token) in sparse.iter().zip(j["experts"].as_array().unwrap()) {
            for chosen in per_token.as_array().unwrap() {
                for e in chosen.as_array().unwrap() {
                    want.insert((*l, e.as_u64().unwrap() as usize), 3);
                }
            }
        }
        assert_eq!(seen, want, "{f} ({}): the experts read (gate, up and down each once) are HF's chosen ones", path.display());
    }
}

/// A step reads only its row's experts: top_k of each sparse layer, three matrices each.
#[test]
fn a_step_reads_only_its_experts() {
    let j = fixture_json("tiny/qwen3_moe/golden.json");
    let tokens = ids(&j["tokens"]);
    let reads = Arc::new(Reads::default());
    let be = Watched { inner: backend::create(BackendKind::Host, 1, Precision::Exact).unwrap(), watcher: Counter(reads.clone()) };
    let m = Arc::new(Model::open_on(&tiny("qwen3_moe"), Box::new(be)).unwrap());
    let mut s = Session::new(m, 0).unwrap();
    s.step_batch(&tokens[..5], Want::None).unwrap();
    reads.counts.lock().unwrap().clear();
    s.step(tokens[5]).unwrap();
    let experts: usize = reads.counts.lock().unwrap().iter().filter(|(name, _)| expert_of(name).is_some()).map(|(_, n)| n).sum();
    // 3 sparse layers x top 2 x (gate, up, down).
    assert_eq!(experts, 3 * 2 * 3);
}

/// `packlm info`'s layer table names the mixture: experts, experts per token, their width, and
/// the dense layer of qwen3_moe_dense (config: mlp_only_layers [1]).
#[test]
fn the_layer_table_shows_experts_and_dense_layers() {
    let m = open(&tiny("qwen3_moe_dense"));
    let t = m.spec().layers_json();
    let experts: Vec<_> = t.as_array().unwrap().iter().map(|l| (l["experts"].as_u64(), l["experts_per_token"].as_u64(), l["expert_width"].as_u64())).collect();
    assert_eq!(experts, vec![(Some(8), Some(2), Some(32)), (None, None, None), (Some(8), Some(2), Some(32))]);
}
