//! The `fast` precision on the real quantized models (scripts/fetch_models.sh; required when
//! PACKLM_REQUIRE_MODELS is set, as make test sets it): which precision a pack gets by default,
//! the bit-level invariants on every kernel path (batched == sequential, threads 1 == N,
//! truncate and restore == fresh), snapshots across precisions, and how far `fast` is from
//! `exact` and from HF.

mod common;

use std::path::Path;
use std::sync::Arc;

use common::*;
use packlm::backend::cpu::CpuBackend;
use packlm::backend::host::row_dot::Isa;
use packlm::backend::host::HostBackend;
use packlm::backend::{BackendKind, Precision};
use packlm::engine::{Model, OpenOptions, Session, Want};
use packlm::pack::chat::Message;
use packlm::sample::argmax;

fn open_at(p: &Path, backend: BackendKind, threads: usize, precision: Option<Precision>) -> Arc<Model> {
    Arc::new(Model::open(p, &OpenOptions { backend, threads, precision, ..Default::default() }).unwrap())
}

/// The host backend at `fast` with the kernels of `isa` forced.
fn open_fast_isa(p: &Path, isa: Isa, threads: usize) -> Arc<Model> {
    let be = CpuBackend::new(HostBackend::with_isa(threads, isa).unwrap().with_precision(Precision::Fast));
    Arc::new(Model::open_on(p, Box::new(be)).unwrap())
}

fn models() -> Vec<(&'static str, std::path::PathBuf)> {
    [("smollm2", smollm2()), ("gemma3", gemma3_270m())].into_iter().filter_map(|(n, p)| Some((n, p?))).collect()
}

/// A prompt of real text for `m`, cut to `n` ids.
fn prompt(m: &Model, n: usize) -> Vec<u32> {
    let text = "The history of the printing press begins in the fifteenth century, when Johannes Gutenberg combined movable metal type, oil-based inks and a wooden press.";
    let mut ids = m.vocab().encode(text, true, false).unwrap();
    ids.truncate(n);
    ids
}

#[test]
fn quantized_packs_default_to_fast_and_float_packs_to_exact() {
    let tiny_llama = open_at(&tiny("llama"), BackendKind::Host, 1, None);
    assert_eq!(tiny_llama.backend().precision(), Precision::Exact, "a float pack defaults to exact");
    let asked_fast = open_at(&tiny("llama"), BackendKind::Host, 1, Some(Precision::Fast));
    assert_eq!(asked_fast.backend().precision(), Precision::Fast, "asked for, fast is what the host backend runs");
    let reference = open_at(&tiny("llama"), BackendKind::Reference, 1, Some(Precision::Fast));
    assert_eq!(reference.backend().precision(), Precision::Exact, "the reference backend has only f32 kernels");
    for (name, p) in models() {
        let m = open_at(&p, BackendKind::Host, 1, None);
        assert_eq!(m.backend().precision(), Precision::Fast, "{name}: a quantized pack defaults to fast");
        let m = open_at(&p, BackendKind::Host, 1, Some(Precision::Exact));
        assert_eq!(m.backend().precision(), Precision::Exact, "{name}: exact when asked");
    }
}

/// Batched == sequential, truncate == fresh and restore == fresh, bit for bit, on `m`.
fn invariants(m: &Arc<Model>, tokens: &[u32], what: &str) {
    let batched = all_rows(m, tokens);
    assert_bits_equal(&batched, &stepped(m, tokens), &format!("{what}: batched vs sequential"));
    let (cut, v) = (tokens.len() / 2, m.spec().vocab_size);
    let mut s = Session::new(m.clone(), 0).unwrap();
    s.step_batch(tokens, Want::None).unwrap();
    let snap = {
        let mut t = Session::new(m.clone(), 0).unwrap();
        t.step_batch(&tokens[..cut], Want::None).unwrap();
        t.snapshot()
    };
    s.truncate(cut).unwrap();
    let want = &batched[cut * v..(cut + 1) * v];
    assert_bits_equal(&s.step(tokens[cut]).unwrap(), want, &format!("{what}: truncate vs fresh"));
    let mut r = Session::new(m.clone(), 0).unwrap();
    r.restore(&snap).unwrap();
    assert_bits_equal(&r.step(tokens[cut]).unwrap(), want, &format!("{what}: restore vs fresh"));
}

#[test]
fn fast_keeps_the_bit_level_invariants_on_every_kernel_path() {
    for (name, p) in models() {
        let two = open_at(&p, BackendKind::Host, 2, Some(Precision::Fast));
        let tokens = prompt(&two, 20);
        invariants(&two, &tokens, &format!("{name} fast"));
        let one = open_at(&p, BackendKind::Host, 1, Some(Precision::Fast));
        assert_bits_equal(&all_rows(&one, &tokens), &all_rows(&two, &tokens), &format!("{name} fast: 1 vs 2 threads"));
        // Every kernel path this CPU runs, forced (the AVX2 one on an AVX-512 machine too).
        // Paths agree with each other only within rounding, so each is checked on its own.
        for isa in [Isa::Portable, Isa::Avx2, Isa::Avx512, Isa::Neon].into_iter().filter(|i| i.available()) {
            let m = open_fast_isa(&p, isa, 3);
            let n = if isa == Isa::Portable { 6 } else { 12 };
            invariants(&m, &tokens[..n], &format!("{name} fast, {isa:?} kernels"));
        }
    }
}

/// A snapshot written at one precision restores at the other: the restored keys are the
/// writer's, so the next logits are close to, not equal to, a fresh pass of the restorer.
#[test]
fn snapshots_restore_across_precisions() {
    for (name, p) in models() {
        let fast = open_at(&p, BackendKind::Host, 2, Some(Precision::Fast));
        let exact = open_at(&p, BackendKind::Host, 2, Some(Precision::Exact));
        let tokens = prompt(&fast, 10);
        for (from, to, what) in [(&fast, &exact, "fast -> exact"), (&exact, &fast, "exact -> fast")] {
            let mut a = Session::new(from.clone(), 0).unwrap();
            a.step_batch(&tokens[..9], Want::None).unwrap();
            let snap = a.snapshot();
            let mut b = Session::new(to.clone(), 0).unwrap();
            b.restore(&snap).unwrap();
            assert!(b.snapshot() == snap, "{name} {what}: the restored state re-encodes to the same bytes");
            let next = b.step(tokens[9]).unwrap();
            let fresh = all_rows(to, &tokens);
            let v = to.spec().vocab_size;
            let d = max_abs_diff(&next, &fresh[9 * v..]);
            eprintln!("{name} {what}: max |restored - fresh| = {d}");
            // Measured 0.32-0.63 (the keys of 9 positions computed at the other precision).
            assert!(d < 2.0, "{name} {what}: max |restored - fresh| = {d}");
            assert_eq!(argmax(&next), argmax(&fresh[9 * v..]), "{name} {what}: next token");
        }
    }
}

/// `fast` against `exact` over every row of a prompt: the top-1 tokens agree on most rows and
/// the logits stay close. The bounds are measured ones with margin: top-1 agreement was 27/29
/// (SmolLM2) and 26/30 (Gemma3), the largest logit difference 1.03 and 0.90, with logits of
/// magnitude 10-30; a kernel that mis-scales a block or drops a min term is off by far more.
/// (The comparison with llama.cpp's own rounding is scripts/perplexity_compare.py's.)
#[test]
fn fast_stays_close_to_exact() {
    for (name, p) in models() {
        let fast = open_at(&p, BackendKind::Host, 2, Some(Precision::Fast));
        let exact = open_at(&p, BackendKind::Host, 2, Some(Precision::Exact));
        let tokens = prompt(&fast, 32);
        let (a, b) = (all_rows(&fast, &tokens), all_rows(&exact, &tokens));
        let v = fast.spec().vocab_size;
        let rows = tokens.len();
        let agree = (0..rows).filter(|&r| argmax(&a[r * v..(r + 1) * v]) == argmax(&b[r * v..(r + 1) * v])).count();
        let d = max_abs_diff(&a, &b);
        eprintln!("{name}: top-1 agreement {agree}/{rows}, max |fast - exact| = {d}");
        assert!(agree * 10 >= rows * 8, "{name}: top-1 agreement {agree}/{rows}");
        assert!(d < 2.0, "{name}: max |fast - exact| = {d}");
    }
}

/// SmolLM2's chat answer at `fast` is HF's (tests/fixtures/smollm2/reference.json).
#[test]
fn fast_answers_the_chat_prompt_as_hf() {
    let Some(p) = smollm2() else { return };
    let m = open_at(&p, BackendKind::Host, 2, None);
    let r = fixture_json("smollm2/reference.json");
    let msgs = [Message { role: "user".into(), content: "What is the capital of France? Answer with one word.".into() }];
    let prompt = m.vocab().encode(&m.render_chat(&msgs, true).unwrap(), true, true).unwrap();
    let mut s = Session::new(m.clone(), 0).unwrap();
    s.step_batch(&prompt, Want::Last).unwrap();
    let want = ids(&r["chat"]["reply"]["ids"]);
    let mut got = Vec::new();
    for _ in 0..want.len() {
        let t = argmax(s.last_logits());
        got.push(t);
        s.step(t).unwrap();
    }
    assert_eq!(got, want, "reply {:?}", m.vocab().decode(&got, true));
}

/// The `n` tokens plain greedy stepping gives after `prefix`.
fn greedy_after(m: &Arc<Model>, prefix: &[u32], n: usize) -> Vec<u32> {
    let mut g = Session::new(m.clone(), 0).unwrap();
    g.step_batch(prefix, Want::Last).unwrap();
    let mut greedy = Vec::new();
    for _ in 0..n {
        let next = argmax(g.last_logits());
        greedy.push(next);
        g.step(next).unwrap();
    }
    greedy
}

/// Verify's first output tile has the rows the backend projects for about the time of one (2 at
/// `fast` on AVX2), the rest follow in larger tiles: with 8 greedy drafts, all right or the
/// first wrong one at each place around that boundary, verify accepts exactly the right
/// prefix, chooses plain stepping's token and keeps a fresh session's bits for that row.
#[test]
fn verify_at_fast_across_the_first_output_tile_equals_stepping() {
    for (name, p) in models() {
        for isa in [Isa::Portable, Isa::Avx2, Isa::Avx512, Isa::Neon].into_iter().filter(|i| i.available()) {
            let m = open_fast_isa(&p, isa, 2);
            let what = format!("{name} fast, {isa:?} kernels (first tile of {} rows)", m.backend().rows_for_one());
            let prefix = prompt(&m, 8);
            let greedy = greedy_after(&m, &prefix, 10);
            let v = m.spec().vocab_size as u32;
            for wrong_at in [None, Some(0), Some(1), Some(2), Some(3), Some(6)] {
                let mut draft = greedy[1..9].to_vec();
                if let Some(w) = wrong_at {
                    draft[w] = (draft[w] + 1) % v;
                }
                let mut s = Session::new(m.clone(), 0).unwrap();
                s.step_batch(&prefix, Want::Last).unwrap();
                let r = s.verify(greedy[0], &draft, packlm::engine::speculative::Acceptance::Greedy).unwrap();
                let n = wrong_at.unwrap_or(8);
                assert_eq!((r.n_accepted, r.next), (n, greedy[n + 1]), "{what}: wrong at {wrong_at:?}");
                let held = [&prefix[..], &greedy[..=n]].concat();
                let want = stepped(&m, &held);
                let tail = &want[want.len() - v as usize..];
                assert_bits_equal(s.last_logits(), tail, &format!("{what}: kept logits, wrong at {wrong_at:?}"));
            }
        }
    }
}

/// The output matrix's products (their activation rows, in order) while a pass runs: the
/// tiles a verify projects to logits in.
#[derive(Default)]
struct Tiles {
    names: std::sync::Mutex<Vec<String>>,
    rows: std::sync::Mutex<Vec<usize>>,
}

struct RecordTiles(Arc<Tiles>);

impl packlm::backend::watched::Watch for RecordTiles {
    fn matrix(&self, w: &packlm::pack::tensor::WeightTensor) -> usize {
        let mut names = self.0.names.lock().unwrap();
        names.push(w.name.clone());
        names.len() - 1
    }
    fn around(&self, call: packlm::backend::watched::Call, run: &mut dyn FnMut()) {
        if let packlm::backend::watched::Call::Matrix { id, rows } = call {
            let name = self.0.names.lock().unwrap()[id].clone();
            if name == "lm_head.weight" || name == "model.embed_tokens.weight" {
                self.0.rows.lock().unwrap().push(rows);
            }
        }
        run();
    }
}

/// A verify after one that took all its drafts projects all its rows in one tile; after one
/// that rejected a draft (and in a fresh session), its first tile has `rows_for_one` rows
/// again; a verify without drafts leaves that as it was. Whatever the tiles, each verify accepts exactly the right prefix, chooses plain
/// stepping's token and keeps a fresh session's bits for that row.
#[test]
fn verify_tiles_follow_the_last_verify_and_keep_the_bits() {
    for (name, p) in models() {
        for isa in [Isa::Portable, Isa::Avx2, Isa::Avx512, Isa::Neon].into_iter().filter(|i| i.available()) {
            let tiles = Arc::new(Tiles::default());
            let be = CpuBackend::new(HostBackend::with_isa(2, isa).unwrap().with_precision(Precision::Fast));
            let watched = packlm::backend::watched::Watched { inner: Box::new(be), watcher: RecordTiles(tiles.clone()) };
            let m = Arc::new(Model::open_on(&p, Box::new(watched)).unwrap());
            let first = m.backend().rows_for_one().min(16);
            let what = format!("{name} fast, {isa:?} kernels (first tile of {first} rows)");
            let prefix = prompt(&m, 8);
            let greedy = greedy_after(&m, &prefix, 24);
            let v = m.spec().vocab_size as u32;
            let mut s = Session::new(m.clone(), 0).unwrap();
            s.step_batch(&prefix, Want::Last).unwrap();
            // (pending at, drafts, first wrong draft, the tiles wanted): all taken in a fresh
            // session; one rejected after that (all rows at once); no drafts; all taken (the
            // rejection's word stands over the empty verify); all taken again (all at once).
            let split = |rows: usize| if first >= rows { vec![rows] } else { vec![first, rows - first] };
            let rounds = [(0usize, 8usize, None, split(9)), (9, 4, Some(1), vec![5]), (11, 0, None, vec![1]), (12, 4, None, split(5)), (17, 4, None, vec![5])];
            for (at, k, wrong, want_tiles) in rounds {
                let mut draft = greedy[at + 1..=at + k].to_vec();
                if let Some(w) = wrong {
                    draft[w] = (draft[w] + 1) % v;
                }
                tiles.rows.lock().unwrap().clear();
                let r = s.verify(greedy[at], &draft, packlm::engine::speculative::Acceptance::Greedy).unwrap();
                let n = wrong.unwrap_or(k);
                assert_eq!((r.n_accepted, r.next), (n, greedy[at + n + 1]), "{what}: drafts after {at}, wrong at {wrong:?}");
                let got_tiles = tiles.rows.lock().unwrap().clone();
                // A rejected draft in the first tile ends the projection there.
                let want_tiles = if wrong.is_some_and(|w| w < want_tiles[0]) { want_tiles[..1].to_vec() } else { want_tiles };
                assert_eq!(got_tiles, want_tiles, "{what}: the output tiles of the verify of drafts after {at}");
                let held = [&prefix[..], &greedy[..=at + n]].concat();
                assert_eq!(s.n_past(), held.len(), "{what}: positions held after {at}");
                let want = stepped(&m, &held);
                assert_bits_equal(s.last_logits(), &want[want.len() - v as usize..], &format!("{what}: kept logits after {at}"));
            }
        }
    }
}
