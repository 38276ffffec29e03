//! Session state on every family: truncate, snapshot/restore and verify leave a session
//! bit-identical to one that only ever saw the tokens it holds; a corrupted snapshot is refused
//! with the session unchanged; sampled acceptance preserves the target distribution.

mod common;

use std::sync::Arc;

use common::*;
use packlm::engine::draft::NgramDrafter;
use packlm::engine::prefix_cache::PrefixCache;
use packlm::engine::speculative::{generate, Acceptance};
use packlm::engine::{Model, Session, Want};
use packlm::sample::{probabilities, SamplerParams};
use packlm::Status;

const FAMILIES: &[&str] = &["llama", "llama_yarn", "mistral", "qwen2", "qwen3", "gemma2", "gemma3", "gemma4", "gemma4_wide", "qwen3_moe", "qwen2_moe", "mixtral", "gpt_oss"];

/// Logits of the step after `prefix`, in a session that only ever saw `prefix`.
fn fresh_next(m: &Arc<Model>, prefix: &[u32], next: u32) -> Vec<f32> {
    let mut s = Session::new(m.clone(), 0).unwrap();
    if !prefix.is_empty() {
        s.step_batch(prefix, Want::None).unwrap();
    }
    s.step(next).unwrap()
}

#[test]
fn truncate_equals_a_fresh_session() {
    for f in FAMILIES {
        let m = open(&tiny(f));
        let t = golden(&tiny(f)).tokens;
        for p in [1, 3, 6, 7, 12, t.len() - 2] {
            let mut s = Session::new(m.clone(), 0).unwrap();
            s.step_batch(&t, Want::None).unwrap();
            s.truncate(p).unwrap();
            assert_eq!(s.n_past(), p);
            assert!(s.last_logits().is_empty());
            let got = s.step(t[p]).unwrap();
            assert_bits_equal(&got, &fresh_next(&m, &t[..p], t[p]), &format!("{f} truncate({p})"));
        }
    }
}

#[test]
fn truncate_past_the_end_is_refused() {
    let m = open(&tiny("llama"));
    let mut s = Session::new(m, 0).unwrap();
    s.step_batch(&[0, 5, 6], Want::None).unwrap();
    let e = s.truncate(4).unwrap_err();
    assert_eq!(e.status, Status::ErrInvalidArgument);
    assert_eq!(s.n_past(), 3);
}

#[test]
fn restore_equals_a_fresh_session() {
    for f in FAMILIES {
        let m = open(&tiny(f));
        let t = golden(&tiny(f)).tokens;
        for p in [1, 7, t.len() - 2] {
            let mut a = Session::new(m.clone(), 0).unwrap();
            a.step_batch(&t[..p], Want::None).unwrap();
            let snap = a.snapshot();
            assert_eq!(snap.len(), a.snapshot_len());
            // Restore into a session that holds something else.
            let mut b = Session::new(m.clone(), 0).unwrap();
            b.step_batch(&t[2..9], Want::None).unwrap();
            b.restore(&snap).unwrap();
            assert_eq!(b.tokens(), t[..p].to_vec());
            let got = b.step(t[p]).unwrap();
            assert_bits_equal(&got, &fresh_next(&m, &t[..p], t[p]), &format!("{f} restore at {p}"));
            // A restored session can still be truncated exactly, below the sliding window too.
            b.truncate(1).unwrap();
            assert_bits_equal(&b.step(t[1]).unwrap(), &fresh_next(&m, &t[..1], t[1]), &format!("{f} restore+truncate"));
        }
    }
}

/// verify with drafts that are partly right: the session then holds n_past + 1 + n_accepted
/// positions and continues exactly as a fresh session would.
#[test]
fn verify_accepts_the_greedy_prefix_and_rolls_back_exactly() {
    for f in FAMILIES {
        let m = open(&tiny(f));
        let t = golden(&tiny(f)).tokens;
        let base = 6;
        // The greedy continuation after t[..=base], from plain steps.
        let mut g = Session::new(m.clone(), 0).unwrap();
        g.step_batch(&t[..=base], Want::Last).unwrap();
        let mut greedy = Vec::new();
        let mut row_logits = Vec::new();
        for _ in 0..5 {
            let next = packlm::sample::argmax(g.last_logits());
            greedy.push(next);
            row_logits.push(g.last_logits().to_vec());
            g.step(next).unwrap();
        }
        row_logits.push(g.last_logits().to_vec());
        for n_right in 0..=4 {
            // Drafts: the first n_right are what greedy would pick, then a wrong one.
            let mut draft: Vec<u32> = greedy[..n_right].to_vec();
            if n_right < 4 {
                draft.push((greedy[n_right] + 1) % 300);
            }
            let mut s = Session::new(m.clone(), 0).unwrap();
            s.step_batch(&t[..base], Want::None).unwrap();
            let r = s.verify(t[base], &draft, Acceptance::Greedy).unwrap();
            assert_eq!(r.n_accepted, n_right, "{f}: accepted");
            assert_eq!(r.next, greedy[n_right], "{f}: correction / bonus token");
            assert_eq!(s.n_past(), base + 1 + n_right);
            // The kept row's logits are those of plain steps.
            assert_bits_equal(s.last_logits(), &row_logits[n_right], &format!("{f}: kept row"));
            let mut prefix = t[..=base].to_vec();
            prefix.extend_from_slice(&greedy[..n_right]);
            let got = s.step(r.next).unwrap();
            assert_bits_equal(&got, &fresh_next(&m, &prefix, r.next), &format!("{f}: after verify accepting {n_right}"));
            assert_eq!(s.counters().accepted, n_right as u64);
        }
    }
}

#[test]
fn greedy_speculative_generation_equals_plain_greedy() {
    // Not gpt_oss: its tiny random model's 40 greedy tokens repeat no two-token run, so the
    // n-gram drafter has nothing to propose (its verify is covered by the test above).
    for f in FAMILIES.iter().filter(|f| **f != "gpt_oss") {
        let m = open(&tiny(f));
        let t = golden(&tiny(f)).tokens;
        // The prompt repeats itself, so that the n-gram drafter proposes from its first round
        // whatever the model then generates.
        let prompt = &[&t[..5], &t[..5]].concat();
        let params = SamplerParams::default();
        let mut plain_s = Session::new(m.clone(), 0).unwrap();
        let plain = generate(&mut plain_s, prompt, 40, &params, &mut 0, None, 0).unwrap();
        for k in [1, 3, 6] {
            let mut s = Session::new(m.clone(), 0).unwrap();
            let mut d = NgramDrafter::default();
            let spec = generate(&mut s, prompt, 40, &params, &mut 0, Some(&mut d), k).unwrap();
            assert_eq!(spec.tokens, plain.tokens, "{f} k={k}");
            assert!(spec.rounds > 0, "{f}: the n-gram drafter never proposed");
        }
    }
}

#[test]
fn corrupt_snapshots_are_refused_and_the_session_is_unchanged() {
    let m = open(&tiny("qwen3"));
    let t = golden(&tiny("qwen3")).tokens;
    let mut src = Session::new(m.clone(), 0).unwrap();
    src.step_batch(&t[..3], Want::None).unwrap();
    let good = src.snapshot();
    let mut s = Session::new(m.clone(), 0).unwrap();
    s.step_batch(&t[5..9], Want::None).unwrap();
    let before = s.snapshot();
    let check = |s: &mut Session, bytes: &[u8], what: &str| {
        let e = s.restore(bytes).expect_err(what);
        assert_eq!(e.status, Status::ErrSnapshot, "{what}: {}", e.message);
        assert_eq!(s.snapshot(), before, "{what}: session changed");
    };
    // Every truncation (the section boundaries among them).
    for len in 0..good.len() {
        check(&mut s, &good[..len], &format!("truncated to {len}"));
    }
    // A flipped bit in every byte: header, tokens, planes, trailer.
    for i in 0..good.len() {
        let mut b = good.clone();
        b[i] ^= 0x10;
        check(&mut s, &b, &format!("byte {i} flipped"));
    }
    // Another model's snapshot, and a wrong format version with a valid checksum.
    let other = open(&tiny("llama"));
    let mut o = Session::new(other, 0).unwrap();
    o.step_batch(&t[..3], Want::None).unwrap();
    check(&mut s, &o.snapshot(), "other model");
    let mut v = good.clone();
    v[8..12].copy_from_slice(&2u32.to_le_bytes());
    let body = v.len() - 8;
    let sum = packlm::kv::snapshot::fnv1a64(&v[..body]);
    v[body..].copy_from_slice(&sum.to_le_bytes());
    let e = s.restore(&v).unwrap_err();
    assert!(e.message.contains("version 2"), "{}", e.message);
    // The session still works and the good snapshot still restores.
    s.restore(&good).unwrap();
    assert_eq!(s.tokens(), t[..3].to_vec());
}

#[test]
fn prefix_cache_reuses_the_longest_shared_prefix() {
    let m = open(&tiny("mistral"));
    let t = golden(&tiny("mistral")).tokens;
    let mut cache = PrefixCache::new(1 << 20);
    let mut a = Session::new(m.clone(), 0).unwrap();
    a.step_batch(&t[..12], Want::None).unwrap();
    cache.store(&a);
    // A prompt sharing the first 9 tokens, then diverging.
    let mut prompt = t[..9].to_vec();
    prompt.extend_from_slice(&[7, 8, 9]);
    let mut s = Session::new(m.clone(), 0).unwrap();
    let reused = cache.restore_longest(&mut s, &prompt).unwrap();
    assert_eq!(reused, 9);
    let got = s.step_batch(&prompt[reused..], Want::Last).unwrap();
    let mut f = Session::new(m.clone(), 0).unwrap();
    assert_bits_equal(&got, &f.step_batch(&prompt, Want::Last).unwrap(), "prefix cache");
}

/// A stored state longer than a session's context is reused up to what fits there, exactly:
/// the session then equals a fresh one that saw those tokens (snapshot bytes and next step).
#[test]
fn prefix_cache_reuses_what_fits_a_smaller_context() {
    let m = open(&tiny("gemma3"));
    let t = golden(&tiny("gemma3")).tokens;
    let mut cache = PrefixCache::new(1 << 20);
    let mut a = Session::new(m.clone(), 0).unwrap();
    a.step_batch(&t[..12], Want::None).unwrap();
    cache.store(&a);
    // A prompt sharing 6 tokens, in a session of 10 positions: the 12-position state is reused.
    let mut prompt = t[..6].to_vec();
    prompt.extend_from_slice(&[7, 8]);
    let mut s = Session::new(m.clone(), 10).unwrap();
    assert_eq!(cache.restore_longest(&mut s, &prompt).unwrap(), 6);
    let got = s.step_batch(&prompt[6..], Want::Last).unwrap();
    let mut f = Session::new(m.clone(), 10).unwrap();
    assert_bits_equal(&got, &f.step_batch(&prompt, Want::Last).unwrap(), "prefix cache into a smaller context");
    // The whole stored prompt and more: as much as the context holds is reused.
    let mut s = Session::new(m.clone(), 10).unwrap();
    assert_eq!(cache.restore_longest(&mut s, &t[..14]).unwrap(), 10);
    let mut f = Session::new(m.clone(), 10).unwrap();
    f.step_batch(&t[..10], Want::None).unwrap();
    assert!(s.snapshot() == f.snapshot(), "the reused 10 positions differ from a fresh session's");
    assert_eq!(s.tokens(), &t[..10]);
}

/// Wilson-Hilferty approximation of the chi-square quantile at upper tail probability 0.001.
fn chi2_critical_001(df: usize) -> f64 {
    let d = df as f64;
    let z = 3.0902;
    d * (1.0 - 2.0 / (9.0 * d) + z * (2.0 / (9.0 * d)).sqrt()).powi(3)
}

/// Pearson chi-square of `counts` against `probs` (bins with expected < 5 are pooled).
fn chi2(counts: &[u64], probs: &[f64]) -> (f64, usize) {
    let n: u64 = counts.iter().sum();
    let (mut stat, mut bins) = (0.0, 0usize);
    let (mut pool_e, mut pool_o) = (0.0, 0.0);
    for (i, &p) in probs.iter().enumerate() {
        let e = p * n as f64;
        if e >= 5.0 {
            stat += (counts[i] as f64 - e).powi(2) / e;
            bins += 1;
        } else {
            pool_e += e;
            pool_o += counts[i] as f64;
        }
    }
    if pool_e > 0.0 {
        stat += (pool_o - pool_e).powi(2) / pool_e.max(1e-12);
        bins += 1;
    }
    (stat, bins - 1)
}

/// Sampled verify with a point-mass drafter: the first emitted token must follow the target
/// distribution p0 exactly, and the second (given the first was d1) p1. 20000 seeded trials;
/// each chi-square must stay under its 0.001 critical value. A wrong rule (accepting with
/// probability 1, or drawing the correction from p instead of the residual) fails by far.
#[test]
fn sampled_acceptance_preserves_the_target_distribution() {
    let m = open(&tiny("llama"));
    let t = golden(&tiny("llama")).tokens;
    let base = 8;
    let params = SamplerParams { temperature: 1.5, top_k: 40, ..Default::default() };
    let mut s = Session::new(m.clone(), 0).unwrap();
    s.step_batch(&t[..base], Want::None).unwrap();
    let pending = t[base];
    // Target distributions of the two judged rows, from plain steps.
    let mut g = Session::new(m.clone(), 0).unwrap();
    g.step_batch(&t[..=base], Want::Last).unwrap();
    let mut hist = t[..=base].to_vec();
    let p0 = probabilities(g.last_logits(), &params, &hist);
    let mut order: Vec<usize> = (0..p0.len()).collect();
    order.sort_by(|&a, &b| p0[b].total_cmp(&p0[a]));
    let d1 = order[2] as u32; // a draft the target takes sometimes, not mostly
    g.step(d1).unwrap();
    hist.push(d1);
    let p1 = probabilities(g.last_logits(), &params, &hist);
    let d2 = order[0] as u32;
    let n = 20000;
    let (mut first, mut second) = (vec![0u64; p0.len()], vec![0u64; p1.len()]);
    let mut rng = 12345u64;
    for _ in 0..n {
        s.truncate(base).unwrap();
        let r = s.verify(pending, &[d1, d2], Acceptance::Sampled { params: &params, draft_probs: None, rng: &mut rng }).unwrap();
        let x1 = if r.n_accepted >= 1 { d1 } else { r.next };
        first[x1 as usize] += 1;
        if r.n_accepted >= 1 {
            let x2 = if r.n_accepted >= 2 { d2 } else { r.next };
            second[x2 as usize] += 1;
        }
    }
    let (c1, df1) = chi2(&first, &p0);
    let (c2, df2) = chi2(&second, &p1);
    eprintln!("first token: chi2 {c1:.1} df {df1} (crit {:.1}); second: chi2 {c2:.1} df {df2} (crit {:.1}); p0(d1) = {:.3}", chi2_critical_001(df1), chi2_critical_001(df2), p0[d1 as usize]);
    assert!(df1 >= 5 && df2 >= 5, "too few bins to test");
    assert!(c1 < chi2_critical_001(df1), "first token distribution differs from the target");
    assert!(c2 < chi2_critical_001(df2), "second token distribution differs from the target");
}

/// A draft pack that is the target itself: every greedy draft must be accepted (its rows are
/// bit-identical to the target's), and the output equals plain greedy. A draft pack with another
/// tokenizer is refused (checked when the real SmolLM2 model is present).
#[test]
fn model_drafter_with_the_same_model_is_always_accepted() {
    use packlm::engine::draft::ModelDrafter;
    for f in ["llama", "gemma3"] {
        let m = open(&tiny(f));
        let t = golden(&tiny(f)).tokens;
        let params = SamplerParams::default();
        let plain = generate(&mut Session::new(m.clone(), 0).unwrap(), &t[..6], 30, &params, &mut 0, None, 0).unwrap();
        let mut d = ModelDrafter::new(m.clone(), &m).unwrap();
        let spec = generate(&mut Session::new(m.clone(), 0).unwrap(), &t[..6], 30, &params, &mut 0, Some(&mut d), 4).unwrap();
        assert_eq!(spec.tokens, plain.tokens, "{f}");
        assert!(spec.drafted > 0);
        assert_eq!(spec.accepted, spec.drafted, "{f}: a self-draft was rejected");
    }
    if let Some(p) = smollm2() {
        let e = ModelDrafter::new(open(&tiny("llama")), &open(&p)).err().expect("another tokenizer must be refused");
        assert_eq!(e.status, Status::ErrInvalidArgument);
    }
}

/// One model, four sessions on four threads at once: each gets the bits a lone session gets.
#[test]
fn sessions_of_one_model_run_in_parallel_threads() {
    let m = open(&tiny("gemma3"));
    let t = golden(&tiny("gemma3")).tokens;
    let want = all_rows(&m, &t);
    let handles: Vec<_> = (0..4)
        .map(|_| {
            let m = m.clone();
            let t = t.clone();
            std::thread::spawn(move || all_rows(&m, &t))
        })
        .collect();
    for h in handles {
        assert_bits_equal(&h.join().unwrap(), &want, "parallel session");
    }
}

/// Greedy drafts of plain greedy stepping, checked across several output tiles (verify projects
/// at most 16 rows at a time): with every draft right, or one wrong in the second or third tile,
/// verify accepts exactly the right prefix, chooses the token plain stepping chooses, and keeps
/// the bits a fresh session gives for that row.
#[test]
fn verify_across_output_tiles_equals_stepping() {
    for f in ["llama", "gemma2", "gemma4"] {
        let m = open(&tiny(f));
        let t = golden(&tiny(f)).tokens;
        let prefix = &t[..4];
        // 42 greedy tokens after the prefix, by plain stepping.
        let mut g = Session::new(m.clone(), 0).unwrap();
        g.step_batch(prefix, Want::Last).unwrap();
        let mut greedy = Vec::new();
        for _ in 0..42 {
            let next = packlm::sample::argmax(g.last_logits());
            greedy.push(next);
            g.step(next).unwrap();
        }
        let v = m.spec().vocab_size as u32;
        for wrong_at in [None, Some(20), Some(37)] {
            let mut draft = greedy[1..41].to_vec();
            if let Some(w) = wrong_at {
                draft[w] = (draft[w] + 1) % v;
            }
            let mut s = Session::new(m.clone(), 0).unwrap();
            s.step_batch(prefix, Want::Last).unwrap();
            let r = s.verify(greedy[0], &draft, Acceptance::Greedy).unwrap();
            let n = wrong_at.unwrap_or(40);
            assert_eq!(r.n_accepted, n, "{f} wrong at {wrong_at:?}");
            assert_eq!(r.next, greedy[n + 1], "{f} wrong at {wrong_at:?}");
            assert_eq!(s.n_past(), prefix.len() + 1 + n);
            let held = [prefix, &greedy[..=n]].concat();
            let want = fresh_next(&m, &held[..held.len() - 1], held[held.len() - 1]);
            assert_bits_equal(s.last_logits(), &want, &format!("{f}: kept logits, wrong at {wrong_at:?}"));
        }
    }
}

/// Sampled verify over 40 drafts (three output tiles) with a drafter distribution: for many
/// seeds the outcome, the random state after the call and the kept logits equal those of the
/// rule applied to one full projection of all rows (step_batch with every row's logits).
#[test]
fn sampled_verify_across_output_tiles_equals_a_full_projection() {
    use packlm::sample::{draw, next_f64, sample};
    let m = open(&tiny("llama"));
    let t = golden(&tiny("llama")).tokens;
    let v = m.spec().vocab_size;
    let params = SamplerParams { temperature: 0.7, top_k: 50, ..Default::default() };
    let prefix = &t[..4];
    let pending = t[4];
    let k = 40;
    // Drafts: the greedy continuation, so that most are likely under the target.
    let mut g = Session::new(m.clone(), 0).unwrap();
    g.step_batch(&t[..5], Want::Last).unwrap();
    let mut draft = Vec::new();
    for _ in 0..k {
        let next = packlm::sample::argmax(g.last_logits());
        draft.push(next);
        g.step(next).unwrap();
    }
    let rows = [&[pending][..], &draft].concat();
    let mut full = Session::new(m.clone(), 0).unwrap();
    full.step_batch(prefix, Want::None).unwrap();
    let all = full.step_batch(&rows, Want::All).unwrap();
    let hist = [prefix, &rows[..]].concat();
    // A drafter distribution close to the target's: the draft token a little more likely than
    // the target says (accepted with probability 0.93), the other tokens reweighted so that the
    // residual max(0, p - q) is not empty.
    let mut q = vec![0f32; k * v];
    for (i, &d) in draft.iter().enumerate() {
        let p = probabilities(&all[i * v..(i + 1) * v], &params, &hist[..prefix.len() + 1 + i]);
        for x in 0..v {
            q[i * v + x] = (p[x] * if x % 2 == 0 { 0.5 } else { 1.2 }) as f32;
        }
        q[i * v + d as usize] = (p[d as usize] / 0.93) as f32;
    }
    let mut accepted_counts = std::collections::BTreeSet::new();
    for seed in 0..200u64 {
        // The rule over the full projection.
        let mut rng = seed * 0x9E37_79B9 + 1;
        let (mut n, mut next) = (0, None);
        for (i, &d) in draft.iter().enumerate() {
            let p = probabilities(&all[i * v..(i + 1) * v], &params, &hist[..prefix.len() + 1 + i]);
            let qd = q[i * v + d as usize] as f64;
            if !(qd > 0.0 && next_f64(&mut rng) < (p[d as usize] / qd).min(1.0)) {
                let residual: Vec<f64> = (0..v).map(|x| (p[x] - q[i * v + x] as f64).max(0.0)).collect();
                next = Some(if residual.iter().sum::<f64>() > 0.0 { draw(&residual, &mut rng) } else { draw(&p, &mut rng) });
                break;
            }
            n += 1;
        }
        let next = next.unwrap_or_else(|| sample(&all[k * v..], &params, &hist, &mut rng));
        // verify, tiled.
        let mut s = Session::new(m.clone(), 0).unwrap();
        s.step_batch(prefix, Want::None).unwrap();
        let mut got_rng = seed * 0x9E37_79B9 + 1;
        let r = s.verify(pending, &draft, Acceptance::Sampled { params: &params, draft_probs: Some(&q), rng: &mut got_rng }).unwrap();
        assert_eq!((r.n_accepted, r.next, got_rng), (n, next, rng), "seed {seed}");
        assert_bits_equal(s.last_logits(), &all[n * v..(n + 1) * v], &format!("seed {seed}: kept logits"));
        accepted_counts.insert(n);
    }
    assert!(accepted_counts.iter().any(|&n| (16..k).contains(&n)), "no seed rejected past the first tile: {accepted_counts:?}");
}

/// A verify whose rows do not fit the context is refused before anything is allocated, with
/// the session unchanged; also when k is absurd (2^40) or k x n_vocab overflows.
#[test]
fn verify_lengths_are_checked_before_allocating() {
    let m = open(&tiny("llama"));
    let mut s = Session::new(m.clone(), 16).unwrap();
    s.step_batch(&[1, 2, 3], Want::Last).unwrap();
    let last = s.last_logits().to_vec();
    for (k, probs) in [(13, false), (1 << 40, false), (usize::MAX, false), (usize::MAX / 2, true)] {
        let e = s.check_verify_lengths(k, probs).unwrap_err();
        assert_eq!(e.status, Status::ErrContextOverflow, "k = {k}");
    }
    assert_eq!(s.check_verify_lengths(12, true).unwrap(), 12 * m.spec().vocab_size);
    let e = s.verify(4, &[5; 13], Acceptance::Greedy).unwrap_err();
    assert_eq!(e.status, Status::ErrContextOverflow);
    assert_eq!(s.n_past(), 3);
    assert_bits_equal(s.last_logits(), &last, "a refused verify keeps the last logits");
}
