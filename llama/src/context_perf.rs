//! A context's performance counts (`llama_perf_context*`), as llama.cpp's llama_context keeps
//! them (llama-context.cpp: `synchronize`, `perf_get_data`, `perf_reset`,
//! `llama_perf_context_print`):
//! - each successful `llama_decode` counts its tokens: a batch of one token is one eval
//!   (`n_eval`), a larger one adds its tokens to the prompt evals (`n_p_eval`); its time goes to
//!   `t_eval_ms` or `t_p_eval_ms`, unless the context was made with `no_perf` (llama.cpp's
//!   default: the counts are kept, the times stay 0);
//! - `t_start_ms` is the model's load start on ggml's clock (`ggml_time_us`: the monotonic
//!   clock), and `t_load_ms` its load time, replaced at the first evaluation by the time from
//!   the load's start to then (llama.cpp's "more accurate load time": page faults of the
//!   mapped weights included);
//! - `n_p_eval` and `n_eval` are given as at least 1 (llama.cpp's, so per-token rates never
//!   divide by 0), `n_reused` is 0: llama.cpp counts the ggml graphs it reuses between
//!   decodes, and packlm builds none;
//! - `llama_perf_context_reset` restarts the clock (`t_start_ms` = now) and zeroes the evals.

use std::time::Instant;

use crate::abi::PerfContextData;
use crate::context::{hold, LlamaContext};
use crate::log::{guard, log, Level};

/// ggml's clock (`ggml_time_us`, libggml-base): CLOCK_MONOTONIC in microseconds.
pub fn time_us() -> i64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // CLOCK_MONOTONIC cannot fail with a valid pointer (POSIX: EINVAL only for an unknown clock).
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as i64 * 1_000_000 + ts.tv_nsec as i64 / 1000
}

/// llama_context's counters.
pub struct Perf {
    no_perf: bool,
    t_start_us: i64,
    t_load_us: i64,
    t_p_eval_us: i64,
    t_eval_us: i64,
    n_p_eval: i32,
    n_eval: i32,
    has_evaluated_once: bool,
}

impl Perf {
    /// A new context's: the model's load start and load time.
    pub fn new(no_perf: bool, model_t_start_us: i64, model_t_load_us: i64) -> Perf {
        Perf { no_perf, t_start_us: model_t_start_us, t_load_us: model_t_load_us, t_p_eval_us: 0, t_eval_us: 0, n_p_eval: 0, n_eval: 0, has_evaluated_once: false }
    }

    /// Counts a decode of `n_tokens` tokens that began at `start`.
    pub fn count(&mut self, n_tokens: usize, start: Instant) {
        let took = i64::try_from(start.elapsed().as_micros()).unwrap_or(i64::MAX);
        let n = i32::try_from(n_tokens).unwrap_or(i32::MAX);
        if n == 1 {
            if !self.no_perf {
                self.t_eval_us = self.t_eval_us.saturating_add(took);
            }
            self.n_eval = self.n_eval.saturating_add(1);
        } else if n > 1 {
            if !self.no_perf {
                self.t_p_eval_us = self.t_p_eval_us.saturating_add(took);
            }
            self.n_p_eval = self.n_p_eval.saturating_add(n);
        }
        if n > 0 && !self.has_evaluated_once {
            self.t_load_us = time_us() - self.t_start_us;
            self.has_evaluated_once = true;
        }
    }

    fn data(&self) -> PerfContextData {
        PerfContextData {
            t_start_ms: 1e-3 * self.t_start_us as f64,
            t_load_ms: 1e-3 * self.t_load_us as f64,
            t_p_eval_ms: 1e-3 * self.t_p_eval_us as f64,
            t_eval_ms: 1e-3 * self.t_eval_us as f64,
            n_p_eval: self.n_p_eval.max(1),
            n_eval: self.n_eval.max(1),
            n_reused: 0,
        }
    }

    fn reset(&mut self) {
        self.t_start_us = time_us();
        self.t_eval_us = 0;
        self.n_eval = 0;
        self.t_p_eval_us = 0;
        self.n_p_eval = 0;
    }
}

/// The context's counts; all zero (logged) for NULL or a context in use on another thread.
#[no_mangle]
pub unsafe extern "C" fn llama_perf_context(ctx: *const LlamaContext) -> PerfContextData {
    const F: &str = "llama_perf_context";
    guard(F, PerfContextData::default(), || match hold(F, ctx) {
        Some(c) => c.perf.data(),
        None => PerfContextData::default(),
    })
}

/// Logs llama.cpp's five lines (info): load time, prompt eval time, eval time, total time
/// (from `t_start_ms` to now) and graphs reused.
#[no_mangle]
pub unsafe extern "C" fn llama_perf_context_print(ctx: *const LlamaContext) {
    const F: &str = "llama_perf_context_print";
    guard(F, (), || {
        let Some(d) = hold(F, ctx).map(|c| c.perf.data()) else { return };
        let t_end_ms = 1e-3 * time_us() as f64;
        let lines = [
            format!("{F}:        load time = {:10.2} ms", d.t_load_ms),
            format!(
                "{F}: prompt eval time = {:10.2} ms / {:5} tokens ({:8.2} ms per token, {:8.2} tokens per second)",
                d.t_p_eval_ms,
                d.n_p_eval,
                d.t_p_eval_ms / d.n_p_eval as f64,
                1e3 / d.t_p_eval_ms * d.n_p_eval as f64
            ),
            format!(
                "{F}:        eval time = {:10.2} ms / {:5} runs   ({:8.2} ms per token, {:8.2} tokens per second)",
                d.t_eval_ms,
                d.n_eval,
                d.t_eval_ms / d.n_eval as f64,
                1e3 / d.t_eval_ms * d.n_eval as f64
            ),
            format!("{F}:       total time = {:10.2} ms / {:5} tokens", t_end_ms - d.t_start_ms, d.n_p_eval + d.n_eval),
            format!("{F}:    graphs reused = {:10}", d.n_reused),
        ];
        for line in lines {
            log(Level::Info, &line);
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn llama_perf_context_reset(ctx: *mut LlamaContext) {
    const F: &str = "llama_perf_context_reset";
    guard(F, (), || {
        if let Some(mut c) = hold(F, ctx) {
            c.perf.reset();
        }
    })
}
