//! What a constraint costs, and what its forced runs save, printed as one JSON line:
//!
//!   cargo run --release --example constraint_cost -- PACK SCHEMA.json [--threads N] [--tokens N] [--runs R]
//!
//! After the prompt "Answer with a JSON value.\n", greedily, R runs of each (alternating):
//! - `masked`: one token at a time under the schema (tok/s), with the time of each row's mask
//!   (the grammar's mask over the vocabulary and the -infinity writes) apart from the step's;
//! - `plain`: the same tokens fed one at a time without the constraint (tok/s);
//! - `drafted`: `Session::generate` under the schema, whose rounds draft the grammar's forced
//!   runs and verify them in one pass (tok/s), the same tokens as `masked`.
//! Each run generates up to `--tokens` tokens (fewer when the reply ends). Medians with
//! [min, max] over the runs.

use std::time::Instant;

use packlm::{Constraint, GenerateOptions, GrammarKind, Model, OpenOptions, Want};

fn median_range(mut v: Vec<f64>) -> serde_json::Value {
    v.sort_by(|a, b| a.total_cmp(b));
    serde_json::json!([v[v.len() / 2], v[0], v[v.len() - 1]])
}

fn main() -> packlm::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let flag = |name: &str, default: usize| -> usize {
        args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).and_then(|v| v.parse().ok()).unwrap_or(default)
    };
    let (pack, schema_path) = (&args[0], &args[1]);
    let (threads, n_new, runs) = (flag("--threads", 2), flag("--tokens", 64), flag("--runs", 5));
    let schema = std::fs::read_to_string(schema_path).map_err(|e| packlm::Error::io(std::path::Path::new(schema_path), e))?;
    let m = Model::open_with(pack, &OpenOptions { threads, ..Default::default() })?;
    let prompt = m.tokenize("Answer with a JSON value.\n", true, false)?;
    let (mut plain, mut masked, mut drafted, mut mask_share, mut mask_us) = (vec![], vec![], vec![], vec![], vec![]);
    let mut reply = Vec::new();
    for _ in 0..runs {
        // One token at a time under the schema; then the same tokens fed without it.
        for constrained in [true, false] {
            let mut s = m.session()?;
            s.step_batch(&prompt, Want::Last)?;
            let mut c = if constrained { Some(Constraint::new(&m, GrammarKind::JsonSchema, &schema)?) } else { None };
            let mut logits = s.last_logits().to_vec();
            let (mut t_mask, mut ids) = (0.0, Vec::new());
            let t0 = Instant::now();
            while ids.len() < if constrained { n_new } else { reply.len() } {
                let tm = Instant::now();
                if let Some(c) = &mut c {
                    c.mask(&mut logits)?;
                }
                t_mask += tm.elapsed().as_secs_f64();
                let best = packlm::argmax(&logits);
                let t = if constrained { best } else { reply[ids.len()] };
                if m.is_stop(t) {
                    break;
                }
                if let Some(c) = &mut c {
                    c.accept(t)?;
                }
                ids.push(t);
                logits = s.step(t)?;
            }
            let t_all = t0.elapsed().as_secs_f64();
            let tok_s = ids.len() as f64 / t_all;
            if constrained {
                masked.push(tok_s);
                mask_us.push(t_mask / ids.len().max(1) as f64 * 1e6);
                mask_share.push(t_mask / (t_all - t_mask));
                reply = ids;
            } else {
                plain.push(tok_s);
            }
        }
        // The same reply through generate: forced runs drafted and verified.
        let mut s = m.session()?;
        let c = Constraint::new(&m, GrammarKind::JsonSchema, &schema)?;
        let t0 = Instant::now();
        let ids: Vec<u32> = s.generate(&prompt, GenerateOptions { max_tokens: n_new, constraint: Some(c), ..Default::default() }).collect::<packlm::Result<Vec<_>>>()?.into_iter().map(|t| t.id).collect();
        drafted.push(ids.len() as f64 / t0.elapsed().as_secs_f64());
        assert_eq!(ids, reply, "the drafted reply differs from the one stepped token by token");
    }
    let text = m.detokenize(&reply, true)?;
    println!(
        "{}",
        serde_json::json!({
            "pack": pack, "threads": threads, "n_vocab": m.info().n_vocab, "reply_tokens": reply.len(), "reply": text,
            "plain_tok_s": median_range(plain), "masked_tok_s": median_range(masked), "drafted_tok_s": median_range(drafted),
            "mask_us": median_range(mask_us), "mask_share_of_step": median_range(mask_share),
        })
    );
    Ok(())
}
