//! A chain's performance counts (`llama_perf_sampler*`): as llama.cpp's chain, the time spent
//! in its accept and apply calls (unless made with `no_perf`) and the number of accepts.

use std::time::Instant;

use super::{kind, Kind};
use crate::abi::{PerfSamplerData, Sampler};
use crate::log::{error, log, Level};

/// `llama_sampler_chain`'s `t_sample_us` and `n_sample`, and whether time is measured.
#[derive(Clone, Copy, Default)]
pub struct ChainPerf {
    pub no_perf: bool,
    pub t_sample_us: i64,
    pub n_sample: i32,
}

impl ChainPerf {
    pub fn new(no_perf: bool) -> ChainPerf {
        ChainPerf { no_perf, ..ChainPerf::default() }
    }

    /// Adds the time since `start` (llama.cpp's `time_meas`: nothing under `no_perf`).
    pub fn add_time(&mut self, start: Instant) {
        if !self.no_perf {
            self.t_sample_us += i64::try_from(start.elapsed().as_micros()).unwrap_or(i64::MAX);
        }
    }
}

/// The chain's counts; None and a log line for NULL or a sampler that is not a chain
/// (llama.cpp aborts the process for both).
unsafe fn chain_perf<'a>(f: &str, chain: *const Sampler) -> Option<&'a mut ChainPerf> {
    match kind(chain) {
        Some(Kind::Chain { perf, .. }) => Some(perf),
        _ => {
            error(f, "invalid sampler passed - requires a sampler created with llama_sampler_chain_init()");
            None
        }
    }
}

/// The time in milliseconds and the number of accepts; all zero (and a log line) for what is
/// not a chain.
#[no_mangle]
pub unsafe extern "C" fn llama_perf_sampler(chain: *const Sampler) -> PerfSamplerData {
    match chain_perf("llama_perf_sampler", chain) {
        Some(p) => PerfSamplerData { t_sample_ms: 1e-3 * p.t_sample_us as f64, n_sample: p.n_sample.max(0) },
        None => PerfSamplerData::default(),
    }
}

/// Logs llama.cpp's line: "samplers time = T ms / N runs".
#[no_mangle]
pub unsafe extern "C" fn llama_perf_sampler_print(chain: *const Sampler) {
    if chain_perf("llama_perf_sampler_print", chain).is_some() {
        let d = llama_perf_sampler(chain);
        log(Level::Info, &format!("llama_perf_sampler_print:    samplers time = {:10.2} ms / {:5} runs", d.t_sample_ms, d.n_sample));
    }
}

#[no_mangle]
pub unsafe extern "C" fn llama_perf_sampler_reset(chain: *mut Sampler) {
    if let Some(p) = chain_perf("llama_perf_sampler_reset", chain) {
        p.t_sample_us = 0;
        p.n_sample = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abi::SamplerChainParams;
    use crate::sampler::{llama_sampler_accept, llama_sampler_chain_init, llama_sampler_clone, llama_sampler_free, llama_sampler_init_greedy};

    #[test]
    fn counts_accepts_as_llama_cpps_chain() {
        unsafe {
            let chain = llama_sampler_chain_init(SamplerChainParams { no_perf: true });
            for t in [3, 1, 4] {
                llama_sampler_accept(chain, t);
            }
            // llama.cpp counts every accept; with no_perf no time is measured.
            let d = llama_perf_sampler(chain);
            assert_eq!((d.n_sample, d.t_sample_ms), (3, 0.0));
            // A clone carries the counts (llama_sampler_chain_clone copies them).
            let copy = llama_sampler_clone(chain);
            assert_eq!(llama_perf_sampler(copy).n_sample, 3);
            llama_perf_sampler_reset(chain);
            assert_eq!(llama_perf_sampler(chain).n_sample, 0);
            assert_eq!(llama_perf_sampler(copy).n_sample, 3);
            // Not a chain: zeros (llama.cpp aborts).
            let greedy = llama_sampler_init_greedy();
            assert_eq!(llama_perf_sampler(greedy).n_sample, 0);
            assert_eq!(llama_perf_sampler(std::ptr::null()).n_sample, 0);
            for s in [chain, copy, greedy] {
                llama_sampler_free(s);
            }
        }
    }
}
