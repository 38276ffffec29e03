//! Contexts with several sequences, as llama.cpp's examples/parallel drives them: a shared
//! prompt decoded in sequence 0 and copied to each client's sequence (llama_memory_seq_cp),
//! then continuous batching: clients start and finish at different steps, every step one
//! llama_decode of one token per active client (interleaved in the batch) and a new client's
//! whole prompt. Every client's greedy tokens and logits equal those of a one-sequence context
//! fed the same tokens, bit for bit; the memory calls act per sequence.

mod common;

use common::*;
use llama::abi::{ContextParams, Token};
use llama::context::*;

const N_SEQ: usize = 4;

fn multi(m: *mut llama::model::LlamaModel) -> *mut LlamaContext {
    let params = ContextParams { n_ctx: 0, n_seq_max: N_SEQ as u32, kv_unified: true, ..llama_context_default_params() };
    let c = unsafe { llama_init_from_model(m, params) };
    assert!(!c.is_null(), "a context of {N_SEQ} sequences is made");
    c
}

/// A batch of (token, position, sequence, wants logits) entries.
unsafe fn decode_entries(c: *mut LlamaContext, entries: &[(Token, i32, i32, bool)]) -> i32 {
    let b = llama_batch_init(entries.len() as i32, 0, 1);
    for (i, &(t, p, s, l)) in entries.iter().enumerate() {
        *b.token.add(i) = t;
        *b.pos.add(i) = p;
        *b.n_seq_id.add(i) = 1;
        **b.seq_id.add(i) = s;
        *b.logits.add(i) = l as i8;
    }
    let b = llama::abi::Batch { n_tokens: entries.len() as i32, ..b };
    let r = llama_decode(c, b);
    llama_batch_free(b);
    r
}

fn argmax(v: &[f32]) -> Token {
    v.iter().enumerate().fold((0, f32::MIN), |best, (i, &x)| if x > best.1 { (i, x) } else { best }).0 as Token
}

unsafe fn row(c: *mut LlamaContext, i: i32, n_vocab: usize) -> Vec<f32> {
    let p = llama_get_logits_ith(c, i);
    assert!(!p.is_null(), "logits of batch index {i}");
    std::slice::from_raw_parts(p, n_vocab).to_vec()
}

/// Greedy tokens and each step's logits of one client alone: the shared prompt, its own
/// prompt, then `n` tokens.
unsafe fn alone(m: *mut llama::model::LlamaModel, system: &[Token], prompt: &[Token], n: usize, n_vocab: usize) -> (Vec<Token>, Vec<Vec<f32>>) {
    let c = context(m);
    assert_eq!(decode(c, system), 0);
    assert_eq!(decode(c, prompt), 0);
    let mut logits = vec![row(c, -1, n_vocab)];
    let mut out = Vec::new();
    for _ in 0..n {
        let t = argmax(logits.last().unwrap());
        out.push(t);
        assert_eq!(decode(c, &[t]), 0);
        logits.push(row(c, -1, n_vocab));
    }
    llama_free(c);
    (out, logits)
}

#[test]
fn continuous_batching_gives_each_client_its_own_bits() { unsafe {
    capture_log();
    let m = model();
    let n_vocab = 300;
    let c = multi(m);
    assert_eq!(llama_n_seq_max(c), N_SEQ as u32);
    let mem = llama_get_memory(c);
    // The shared prompt in sequence 0, copied to the clients' sequences 1..3.
    let system: Vec<Token> = vec![0, 17, 42, 99, 5, 23];
    let entries: Vec<_> = system.iter().enumerate().map(|(i, &t)| (t, i as i32, 0, false)).collect();
    assert_eq!(decode_entries(c, &entries), 0);
    for s in 1..N_SEQ as i32 {
        llama_memory_seq_cp(mem, 0, s, -1, -1);
        assert_eq!(llama_memory_seq_pos_max(mem, s), system.len() as i32 - 1);
    }
    // Clients: (sequence, its prompt, the step it starts at, tokens to generate).
    let clients: [(i32, Vec<Token>, usize, usize); 3] = [(1, vec![7, 8, 9], 0, 6), (2, vec![11, 12], 2, 4), (3, vec![13, 14, 15, 16, 17], 3, 7)];
    let want: Vec<_> = clients.iter().map(|(_, p, _, n)| alone(m, &system, p, *n, n_vocab)).collect();
    let mut got: Vec<(Vec<Token>, Vec<Vec<f32>>)> = vec![(Vec::new(), Vec::new()); clients.len()];
    let mut pending: Vec<Option<Token>> = vec![None; clients.len()];
    let mut step = 0;
    loop {
        // One batch: a token for every running client, then the prompts of clients starting now.
        let mut entries = Vec::new();
        let mut owners = Vec::new();
        for (k, (s, _, _, _)) in clients.iter().enumerate() {
            if let Some(t) = pending[k] {
                entries.push((t, llama_memory_seq_pos_max(mem, *s) + 1, *s, true));
                owners.push(k);
            }
        }
        for (k, (s, prompt, start, _)) in clients.iter().enumerate() {
            if *start == step {
                let at = llama_memory_seq_pos_max(mem, *s) + 1;
                for (j, &t) in prompt.iter().enumerate() {
                    entries.push((t, at + j as i32, *s, j + 1 == prompt.len()));
                }
                owners.push(k);
            }
        }
        if entries.is_empty() {
            break;
        }
        assert_eq!(decode_entries(c, &entries), 0, "step {step}");
        // Each client's logits are those of its last entry in the batch.
        let mut last_of = vec![None; clients.len()];
        let mut o = 0;
        for (i, e) in entries.iter().enumerate() {
            if e.3 {
                last_of[owners[o]] = Some(i);
                o += 1;
            }
        }
        for (k, (_, _, _, n)) in clients.iter().enumerate() {
            let Some(i) = last_of[k] else { continue };
            let logits = row(c, i as i32, n_vocab);
            got[k].1.push(logits.clone());
            if got[k].0.len() < *n {
                let t = argmax(&logits);
                got[k].0.push(t);
                pending[k] = Some(t);
            } else {
                pending[k] = None;
                // A finished client's sequence is emptied for the next one.
                assert!(llama_memory_seq_rm(mem, clients[k].0, -1, -1));
                assert_eq!(llama_memory_seq_pos_max(mem, clients[k].0), -1);
            }
        }
        step += 1;
        assert!(step < 64, "the clients finish");
    }
    for (k, ((wt, wl), (gt, gl))) in want.iter().zip(&got).enumerate() {
        assert_eq!(gt, wt, "client {k}: tokens in a shared context vs alone");
        assert_eq!(gl.len(), wl.len(), "client {k}: logits rows");
        for (j, (a, b)) in gl.iter().zip(wl).enumerate() {
            assert!(a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits()), "client {k}: logits {j} differ from alone");
        }
    }
    llama_free(c);
    llama::model::llama_model_free(m);
}}

/// The memory calls act per sequence and refuse what they cannot do, changing nothing: a
/// token in a sequence the context lacks or at the wrong position, a removal from the middle, a
/// copy from a position other than 0; seq_keep empties the others; per-sequence state bytes
/// move a sequence to another context's sequence exactly.
#[test]
fn memory_calls_act_per_sequence() { unsafe {
    capture_log();
    let m = model();
    let c = multi(m);
    let mem = llama_get_memory(c);
    assert_eq!(decode_entries(c, &[(5, 0, 0, false), (6, 0, 1, false), (7, 1, 1, true)]), 0);
    assert_eq!((llama_memory_seq_pos_max(mem, 0), llama_memory_seq_pos_max(mem, 1), llama_memory_seq_pos_max(mem, 2)), (0, 1, -1));
    assert_eq!(decode_entries(c, &[(5, 0, N_SEQ as i32, true)]), -1, "a sequence the context lacks");
    assert!(logged(&["llama_decode", "sequence 4"]));
    assert_eq!(decode_entries(c, &[(5, 3, 0, true)]), -1, "a position past the end");
    assert!(!llama_memory_seq_rm(mem, 1, 0, 1), "only a tail can be removed");
    assert_eq!(llama_memory_seq_pos_max(mem, 1), 1);
    llama_memory_seq_cp(mem, 1, 2, 1, -1);
    assert_eq!(llama_memory_seq_pos_max(mem, 2), -1, "a copy that does not start at 0 is refused");
    llama_memory_seq_cp(mem, 1, 2, 0, 1);
    assert_eq!(llama_memory_seq_pos_max(mem, 2), 0, "a prefix copy");

    // Sequence 1's state into sequence 3 of another context: the next token's logits agree.
    let n = llama_state_seq_get_size(c, 1);
    let mut bytes = vec![0u8; n];
    assert_eq!(llama_state_seq_get_data(c, bytes.as_mut_ptr(), n, 1), n);
    let d = multi(m);
    assert_eq!(llama_state_seq_set_data(d, bytes.as_ptr(), n, 3), n);
    assert_eq!(llama_memory_seq_pos_max(llama_get_memory(d), 3), 1);
    assert_eq!(decode_entries(c, &[(9, 2, 1, true)]), 0);
    let a = row(c, 0, 300);
    assert_eq!(decode_entries(d, &[(9, 2, 3, true)]), 0);
    let b = row(d, 0, 300);
    assert!(a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()), "a sequence's state moved to another sequence gives its bits");
    bytes[n / 2] ^= 1;
    assert_eq!(llama_state_seq_set_data(d, bytes.as_ptr(), n, 2), 0, "changed bytes are refused");
    assert_eq!(llama_memory_seq_pos_max(llama_get_memory(d), 2), -1);

    // The whole-context state holds sequence 0 alone.
    assert_eq!(llama_state_get_size(c), 0, "other sequences hold positions");
    llama_memory_seq_keep(mem, 0);
    assert_eq!((llama_memory_seq_pos_max(mem, 0), llama_memory_seq_pos_max(mem, 1), llama_memory_seq_pos_max(mem, 2)), (0, -1, -1));
    assert!(llama_state_get_size(c) > 0);
    llama_free(d);
    llama_free(c);
    llama::model::llama_model_free(m);
}}
