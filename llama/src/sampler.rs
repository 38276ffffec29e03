//! Samplers (`llama_sampler_*`) with llama.cpp's semantics (its src/llama-sampler.cpp): a
//! chain applies its samplers in the order they were added, each to the candidate array
//! the previous one left; temperature is its own step wherever it stands; `greedy`, `dist`,
//! the mirostats and adaptive-p select. A sampler the client defines (its own
//! `llama_sampler_i`) runs through its vtable. Where llama.cpp builds an empty sampler for
//! settings that change nothing ("?xtc" and the like), so does this.
//! The grammar sampler's state and rules are in `grammar`; dynamic temperature, XTC and
//! top-n-sigma in `filters`; the mirostats and adaptive-p in `mirostat`; DRY in `dry`;
//! infill in `infill` (each with its `llama_sampler_init_*`); this file holds the kinds, the
//! vtable, the chain and the rest of the API. Seeded samplers draw as llama.cpp's do (`rng`).
//! Samplers this library cannot build return NULL, and a chain given NULL refuses to sample,
//! so nothing samples without a constraint the client asked for.

pub(crate) mod backend;
mod dry;
mod filters;
mod infill;
mod mirostat;
mod perf;

pub use dry::llama_sampler_init_dry;
pub use filters::{llama_sampler_init_temp_ext, llama_sampler_init_top_n_sigma, llama_sampler_init_xtc};
pub use infill::llama_sampler_init_infill;
pub use mirostat::{llama_sampler_init_adaptive_p, llama_sampler_init_mirostat, llama_sampler_init_mirostat_v2};

use std::collections::VecDeque;
use std::ffi::{c_char, c_void};
use std::ptr;
use std::time::Instant;

use crate::abi::{LogitBias, Sampler, SamplerChainParams, SamplerI, Token, TokenData, TokenDataArray};
use crate::backend_sampling::Start;
use crate::context::{candidates_for_sampling, LlamaContext};
use crate::grammar::{self, GrammarSampler, Lazy};
use crate::log::{error, guard};
use crate::rng::Mt19937;
use crate::model::LlamaModel;
use dry::Dry;
use filters::{TempExt, Xtc};
use infill::Infill;
use perf::ChainPerf;
use mirostat::{AdaptiveP, Mirostat, MirostatV2};

/// `LLAMA_DEFAULT_SEED`: draw a seed.
const DEFAULT_SEED: u32 = 0xFFFF_FFFF;

enum Kind {
    /// `backend`: after `llama_set_sampler`, how many of its leading samplers run at each
    /// `llama_decode` (`backend::init`); `llama_sampler_apply` then skips them, as llama.cpp's
    /// chain does once backend-initialized.
    Chain { samplers: Vec<*mut Sampler>, broken: bool, perf: ChainPerf, backend: Option<usize> },
    Greedy,
    /// llama.cpp's generator, seeded with `seed` (the drawn one for LLAMA_DEFAULT_SEED).
    Dist { seed: u32, rng: Box<Mt19937> },
    Penalties { last_n: usize, repeat: f32, freq: f32, present: f32, history: VecDeque<Token> },
    TopK(i32),
    TopP { p: f32, min_keep: usize },
    MinP { p: f32, min_keep: usize },
    Typical { p: f32, min_keep: usize },
    Temp(f32),
    LogitBias(Vec<LogitBias>),
    /// None: made with no grammar text, and does nothing (as llama.cpp's).
    Grammar(Option<Box<GrammarSampler>>),
    /// llama.cpp's empty sampler, named for the settings that made it ("?xtc"): does nothing.
    Empty(&'static std::ffi::CStr),
    TempExt(TempExt),
    Xtc(Box<Xtc>),
    TopNSigma(f32),
    Mirostat(Box<Mirostat>),
    MirostatV2(Box<MirostatV2>),
    AdaptiveP(Box<AdaptiveP>),
    Dry(Box<Dry>),
    Infill(Box<Infill>),
}

impl Kind {
    fn name(&self) -> &'static std::ffi::CStr {
        match self {
            Kind::Chain { .. } => c"chain",
            Kind::Greedy => c"greedy",
            Kind::Dist { .. } => c"dist",
            Kind::Penalties { .. } => c"penalties",
            Kind::TopK(_) => c"top-k",
            Kind::TopP { .. } => c"top-p",
            Kind::MinP { .. } => c"min-p",
            Kind::Typical { .. } => c"typical",
            Kind::Temp(_) => c"temp",
            Kind::LogitBias(_) => c"logit-bias",
            Kind::Grammar(_) => c"grammar",
            Kind::Empty(name) => name,
            Kind::TempExt(_) => c"temp-ext",
            Kind::Xtc(_) => c"xtc",
            Kind::TopNSigma(_) => c"top-n-sigma",
            Kind::Mirostat(_) => c"mirostat",
            Kind::MirostatV2(_) => c"mirostat-v2",
            Kind::AdaptiveP(_) => c"adaptive-p",
            Kind::Dry(_) => c"dry",
            Kind::Infill(_) => c"infill",
        }
    }
}

/// The vtable of this library's samplers; its pointers are all NULL or functions, never
/// written, so sharing it between threads is sound.
struct SharedVtable(SamplerI);
unsafe impl Sync for SharedVtable {}

static BUILTIN: SharedVtable = SharedVtable(SamplerI {
    name: Some(builtin_name),
    accept: Some(builtin_accept),
    apply: Some(builtin_apply),
    reset: Some(builtin_reset),
    clone: Some(builtin_clone),
    free: Some(builtin_free),
    backend_init: ptr::null_mut(),
    backend_accept: ptr::null_mut(),
    backend_apply: ptr::null_mut(),
    backend_set_input: ptr::null_mut(),
    backend_reset: ptr::null_mut(),
    copy_state: ptr::null_mut(),
});

fn new_sampler(kind: Kind) -> *mut Sampler {
    let ctx = Box::into_raw(Box::new(kind)) as *mut c_void;
    Box::into_raw(Box::new(Sampler { iface: &BUILTIN.0, ctx }))
}

unsafe fn is_builtin(s: *const Sampler) -> bool {
    !s.is_null() && ptr::eq((*s).iface, &BUILTIN.0)
}

unsafe fn kind<'a>(s: *const Sampler) -> Option<&'a mut Kind> {
    if is_builtin(s) && !(*s).ctx.is_null() {
        Some(&mut *((*s).ctx as *mut Kind))
    } else {
        None
    }
}

unsafe extern "C" fn builtin_name(s: *const Sampler) -> *const c_char {
    kind(s).map(|k| k.name().as_ptr()).unwrap_or(ptr::null())
}

unsafe extern "C" fn builtin_accept(s: *mut Sampler, token: Token) {
    match kind(s) {
        Some(Kind::Chain { samplers, perf, .. }) => {
            let start = Instant::now();
            for &x in samplers.iter() {
                llama_sampler_accept(x, token);
            }
            perf.add_time(start);
            perf.n_sample += 1;
        }
        Some(Kind::Penalties { last_n, history, .. }) if *last_n > 0 => {
            if history.len() == *last_n {
                history.pop_front();
            }
            history.push_back(token);
        }
        Some(Kind::Grammar(Some(g))) => g.accept(token),
        Some(Kind::Dry(d)) => d.accept(token),
        Some(Kind::AdaptiveP(a)) => a.accept(token),
        _ => {}
    }
}

unsafe extern "C" fn builtin_reset(s: *mut Sampler) {
    match kind(s) {
        Some(Kind::Chain { samplers, .. }) => {
            for &x in samplers.iter() {
                llama_sampler_reset(x);
            }
        }
        Some(Kind::Penalties { history, .. }) => history.clear(),
        Some(Kind::Dist { seed, rng }) => **rng = Mt19937::new(*seed),
        Some(Kind::Grammar(Some(g))) => g.reset(),
        Some(Kind::Xtc(x)) => x.reset(),
        Some(Kind::Mirostat(m)) => m.reset(),
        Some(Kind::MirostatV2(m)) => m.reset(),
        Some(Kind::AdaptiveP(a)) => a.reset(),
        Some(Kind::Dry(d)) => d.reset(),
        _ => {}
    }
}

unsafe extern "C" fn builtin_clone(s: *const Sampler) -> *mut Sampler {
    let Some(k) = kind(s) else { return ptr::null_mut() };
    let copy = match k {
        Kind::Chain { samplers, broken, perf, .. } => {
            let mut out = Vec::with_capacity(samplers.len());
            for &x in samplers.iter() {
                let c = llama_sampler_clone(x);
                if c.is_null() {
                    for c in out {
                        llama_sampler_free(c);
                    }
                    return ptr::null_mut();
                }
                out.push(c);
            }
            // As llama.cpp's clone: a new chain, not backend-initialized.
            Kind::Chain { samplers: out, broken: *broken, perf: *perf, backend: None }
        }
        Kind::Greedy => Kind::Greedy,
        Kind::Dist { seed, rng } => Kind::Dist { seed: *seed, rng: rng.clone() },
        Kind::Penalties { last_n, repeat, freq, present, history } => {
            Kind::Penalties { last_n: *last_n, repeat: *repeat, freq: *freq, present: *present, history: history.clone() }
        }
        Kind::TopK(k) => Kind::TopK(*k),
        Kind::TopP { p, min_keep } => Kind::TopP { p: *p, min_keep: *min_keep },
        Kind::MinP { p, min_keep } => Kind::MinP { p: *p, min_keep: *min_keep },
        Kind::Typical { p, min_keep } => Kind::Typical { p: *p, min_keep: *min_keep },
        Kind::Temp(t) => Kind::Temp(*t),
        Kind::LogitBias(b) => Kind::LogitBias(b.clone()),
        Kind::Grammar(g) => Kind::Grammar(g.clone()),
        Kind::Empty(name) => Kind::Empty(name),
        Kind::TempExt(t) => Kind::TempExt(t.clone()),
        Kind::Xtc(x) => Kind::Xtc(x.clone()),
        Kind::TopNSigma(n) => Kind::TopNSigma(*n),
        Kind::Mirostat(m) => Kind::Mirostat(m.clone()),
        Kind::MirostatV2(m) => Kind::MirostatV2(m.clone()),
        Kind::AdaptiveP(a) => Kind::AdaptiveP(Box::new(a.clone_as_llama_cpp())),
        Kind::Dry(d) => Kind::Dry(d.clone()),
        Kind::Infill(i) => Kind::Infill(i.clone()),
    };
    new_sampler(copy)
}

/// Frees the sampler's state (a chain frees the samplers it holds).
unsafe extern "C" fn builtin_free(s: *mut Sampler) {
    if !is_builtin(s) || (*s).ctx.is_null() {
        return;
    }
    let k = Box::from_raw((*s).ctx as *mut Kind);
    (*s).ctx = ptr::null_mut();
    if let Kind::Chain { samplers, .. } = *k {
        for x in samplers {
            llama_sampler_free(x);
        }
    }
}

/// Why a chain holding a sampler that could not be built does not sample.
const BROKEN: &str = "the chain holds a sampler that could not be built (NULL: unsupported, or its arguments were refused); refusing to sample without it";

/// Whether `s` is a chain that holds `x` at any depth.
unsafe fn holds(s: *const Sampler, x: *const Sampler) -> bool {
    match kind(s) {
        Some(Kind::Chain { samplers, .. }) => samplers.iter().any(|&y| ptr::eq(y, x) || holds(y, x)),
        _ => false,
    }
}

/// Whether `s` is a chain that holds, at any depth, a sampler that could not be built.
unsafe fn is_broken(s: *const Sampler) -> bool {
    match kind(s) {
        Some(Kind::Chain { samplers, broken, .. }) => *broken || samplers.iter().any(|&x| is_broken(x)),
        _ => false,
    }
}

/// A broken chain (`is_broken`), nested or not, changes nothing and selects nothing: the
/// candidates are left as they were with `selected` -1, and a log line says why.
unsafe extern "C" fn builtin_apply(s: *mut Sampler, cur: *mut TokenDataArray) {
    let Some(k) = kind(s) else { return };
    if cur.is_null() {
        return;
    }
    let cur = &mut *cur;
    if let Kind::Chain { samplers, perf, backend, .. } = k {
        if is_broken(s) {
            error("llama_sampler_apply", BROKEN);
            cur.selected = -1;
            return;
        }
        let start = Instant::now();
        for &x in samplers.iter().skip(backend.unwrap_or(0)) {
            llama_sampler_apply(x, cur);
        }
        perf.add_time(start);
        return;
    }
    let mut v: Vec<TokenData> = if cur.data.is_null() { Vec::new() } else { std::slice::from_raw_parts(cur.data, cur.size).to_vec() };
    let mut sorted = cur.sorted;
    let mut selected = cur.selected;
    let dropped = apply_kind(k, &mut v, &mut sorted, &mut selected);
    // Filters only shrink the array: write the survivors back in place.
    let n = v.len().min(cur.size);
    if n > 0 {
        ptr::copy_nonoverlapping(v.as_ptr(), cur.data, n);
    }
    // XTC drops leading candidates as llama.cpp does, by moving `data` past them.
    let dropped = dropped.min(n);
    cur.data = cur.data.add(dropped);
    cur.size = n - dropped;
    cur.sorted = sorted;
    cur.selected = selected;
}

fn sort_desc(v: &mut [TokenData], sorted: &mut bool) {
    if !*sorted {
        v.sort_by(|a, b| b.logit.total_cmp(&a.logit));
        *sorted = true;
    }
}

/// llama.cpp's softmax over the candidates: sorted by logit, p = exp(l - max) / sum.
fn softmax(v: &mut [TokenData], sorted: &mut bool) {
    softmax_impl(v, sorted, true);
}

/// llama.cpp's `llama_sampler_softmax_impl`: p = expf(logit - max) / sum in float, sorted
/// first when `do_sort`. The max is the first logit when the array says it is sorted (even
/// where a sampler has since changed the logits, as llama.cpp reads it), else the largest.
fn softmax_impl(v: &mut [TokenData], sorted: &mut bool, do_sort: bool) {
    if v.is_empty() {
        return;
    }
    if do_sort {
        sort_desc(v, sorted);
    }
    let mut max = v[0].logit;
    if !*sorted {
        for d in v.iter() {
            // std::max(a, b): b only when a < b.
            if max < d.logit {
                max = d.logit;
            }
        }
    }
    let mut sum = 0.0f32;
    for d in v.iter_mut() {
        d.p = (d.logit - max).exp();
        sum += d.p;
    }
    for d in v.iter_mut() {
        d.p /= sum;
    }
}

/// llama.cpp's `llama_sampler_temp_impl`: logits over `t`; for `t` <= 0 only the first
/// largest logit stays finite.
fn temp_impl(v: &mut [TokenData], t: f32) {
    if t <= 0.0 {
        let mut best = 0;
        for (i, d) in v.iter().enumerate() {
            if d.logit > v[best].logit {
                best = i;
            }
        }
        for (i, d) in v.iter_mut().enumerate() {
            if i != best {
                d.logit = f32::NEG_INFINITY;
            }
        }
        return;
    }
    for d in v.iter_mut() {
        d.logit /= t;
    }
}

/// llama.cpp's `get_rng_seed`: the seed, or a drawn one for LLAMA_DEFAULT_SEED.
fn rng_seed(seed: u32) -> u32 {
    if seed == DEFAULT_SEED {
        draw_seed()
    } else {
        seed
    }
}

/// Applies one sampler (not a chain) to the candidates; returns how many leading candidates
/// it dropped by moving the array's start (XTC's way), 0 for every other.
fn apply_kind(k: &mut Kind, v: &mut Vec<TokenData>, sorted: &mut bool, selected: &mut i64) -> usize {
    match k {
        Kind::Chain { .. } => {}
        Kind::Greedy => {
            let mut best = 0;
            for (i, d) in v.iter().enumerate() {
                if d.logit > v[best].logit {
                    best = i;
                }
            }
            *selected = if v.is_empty() { -1 } else { best as i64 };
        }
        // llama.cpp's draw (llama_sampler_dist_apply): p = expf(logit - max) in f32, summed in
        // f64; one uniform double u; the first candidate where the running f64 sum reaches
        // sum * u; the probabilities then normalized. One candidate still takes a draw.
        Kind::Dist { rng, .. } => {
            if v.is_empty() {
                *selected = -1;
                return 0;
            }
            *selected = 0;
            if v.len() == 1 {
                rng.uniform();
                v[0].p = 1.0;
                return 0;
            }
            let max_l = if *sorted { v[0].logit } else { v.iter().fold(v[0].logit, |m, d| m.max(d.logit)) };
            let mut sum = 0.0f64;
            for d in v.iter_mut() {
                d.p = (d.logit - max_l).exp();
                sum += d.p as f64;
            }
            let target = sum * rng.uniform();
            let mut run = 0.0f64;
            let mut found = None;
            for (i, d) in v.iter_mut().enumerate() {
                if found.is_none() {
                    run += d.p as f64;
                    if run >= target {
                        found = Some(i);
                    }
                }
                d.p = (d.p as f64 / sum) as f32;
            }
            *selected = found.unwrap_or(v.len() - 1) as i64;
        }
        Kind::Penalties { last_n, repeat, freq, present, history } => {
            if *last_n == 0 || (*repeat == 1.0 && *freq == 0.0 && *present == 0.0) {
                return 0;
            }
            let mut counts = std::collections::HashMap::new();
            for &t in history.iter() {
                *counts.entry(t).or_insert(0u32) += 1;
            }
            for d in v.iter_mut() {
                let Some(&c) = counts.get(&d.id) else { continue };
                if d.logit <= 0.0 {
                    d.logit *= *repeat;
                } else {
                    d.logit /= *repeat;
                }
                d.logit -= c as f32 * *freq + *present;
            }
            *sorted = false;
        }
        Kind::TopK(k) => {
            if *k <= 0 {
                return 0;
            }
            sort_desc(v, sorted);
            v.truncate(*k as usize);
        }
        Kind::TopP { p, min_keep } => {
            if *p >= 1.0 {
                return 0;
            }
            softmax(v, sorted);
            let mut cum = 0.0f32;
            let mut keep = v.len();
            for (i, d) in v.iter().enumerate() {
                cum += d.p;
                if cum >= *p && i + 1 >= *min_keep {
                    keep = i + 1;
                    break;
                }
            }
            v.truncate(keep);
        }
        Kind::MinP { p, min_keep } => {
            if *p <= 0.0 || v.is_empty() {
                return 0;
            }
            let max = v.iter().map(|d| d.logit).fold(f32::NEG_INFINITY, f32::max);
            let min_logit = max + p.ln();
            let kept: Vec<TokenData> = v.iter().copied().filter(|d| d.logit >= min_logit).collect();
            if kept.len() >= *min_keep {
                *v = kept;
            } else {
                sort_desc(v, sorted);
                v.truncate((*min_keep).max(1));
            }
        }
        Kind::Typical { p, min_keep } => {
            if *p >= 1.0 {
                return 0;
            }
            softmax(v, sorted);
            let entropy: f32 = v.iter().filter(|d| d.p > 0.0).map(|d| -d.p * d.p.ln()).sum();
            let mut scored: Vec<(f32, TokenData)> = v.iter().map(|d| ((-d.p.ln() - entropy).abs(), *d)).collect();
            scored.sort_by(|a, b| a.0.total_cmp(&b.0));
            let mut cum = 0.0f32;
            let mut keep = scored.len();
            for (i, (_, d)) in scored.iter().enumerate() {
                cum += d.p;
                if cum > *p && i + 1 >= *min_keep {
                    keep = i + 1;
                    break;
                }
            }
            *v = scored.into_iter().take(keep).map(|(_, d)| d).collect();
            *sorted = false;
        }
        Kind::Temp(t) => temp_impl(v, *t),
        Kind::LogitBias(biases) => {
            for b in biases.iter() {
                if let Some(d) = v.iter_mut().find(|d| d.id == b.token) {
                    d.logit += b.bias;
                }
            }
            *sorted = false;
        }
        Kind::Grammar(g) => {
            // A candidate set to -infinity may stand anywhere in a sorted array.
            if g.as_mut().is_some_and(|g| g.apply(v)) {
                *sorted = false;
            }
        }
        Kind::Empty(_) => {}
        Kind::TempExt(t) => t.apply(v, sorted),
        Kind::Xtc(x) => return x.apply(v, sorted),
        Kind::TopNSigma(n) => filters::top_n_sigma(v, *n),
        Kind::Mirostat(m) => m.apply(v, sorted, selected),
        Kind::MirostatV2(m) => m.apply(v, sorted, selected),
        Kind::AdaptiveP(a) => a.apply(v, sorted, selected),
        Kind::Dry(d) => d.apply(v, sorted),
        Kind::Infill(i) => i.apply(v, sorted),
    }
    0
}

/// splitmix64 (Steele, Lea and Flood): the state advances by a constant, the output is mixed.
fn next_u64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn draw_seed() -> u32 {
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0);
    let mut s = t ^ (std::process::id() as u64) << 32;
    next_u64(&mut s) as u32
}

// ---- the API ----

#[no_mangle]
pub extern "C" fn llama_sampler_chain_default_params() -> SamplerChainParams {
    SamplerChainParams { no_perf: true }
}

#[no_mangle]
pub extern "C" fn llama_sampler_chain_init(params: SamplerChainParams) -> *mut Sampler {
    new_sampler(Kind::Chain { samplers: Vec::new(), broken: false, perf: ChainPerf::new(params.no_perf), backend: None })
}

/// Takes ownership of `s`. NULL (a sampler that could not be built) marks the chain as
/// unable to sample.
#[no_mangle]
pub unsafe extern "C" fn llama_sampler_chain_add(chain: *mut Sampler, s: *mut Sampler) {
    const F: &str = "llama_sampler_chain_add";
    guard(F, (), || match kind(chain) {
        Some(Kind::Chain { samplers, broken, .. }) => {
            if s.is_null() {
                error(F, "the sampler added is NULL (it could not be built); this chain will refuse to sample");
                *broken = true;
            } else if ptr::eq(s, chain) || holds(s, chain) {
                // A chain inside itself would apply, and free, itself without end.
                error(F, "a chain cannot be added to itself; this chain will refuse to sample");
                *broken = true;
            } else {
                samplers.push(s);
            }
        }
        _ => error(F, "not a sampler chain"),
    })
}

/// Sampler `i` of the chain, or NULL outside it. llama.h: `i == -1` gives the chain itself,
/// the way to ask whether a sampler is a chain (llama-sampler.cpp), so a non-chain asked with
/// -1 gives NULL without a log line.
#[no_mangle]
pub unsafe extern "C" fn llama_sampler_chain_get(chain: *mut Sampler, i: i32) -> *mut Sampler {
    const F: &str = "llama_sampler_chain_get";
    guard(F, ptr::null_mut(), || match kind(chain) {
        Some(Kind::Chain { .. }) if i == -1 => chain,
        _ if i == -1 => ptr::null_mut(),
        Some(Kind::Chain { samplers, .. }) => match usize::try_from(i).ok().and_then(|i| samplers.get(i)) {
            Some(&s) => s,
            None => {
                error(F, &format!("index {i} is outside the chain of {}", samplers.len()));
                ptr::null_mut()
            }
        },
        _ => {
            error(F, "not a sampler chain");
            ptr::null_mut()
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn llama_sampler_chain_n(chain: *const Sampler) -> i32 {
    const F: &str = "llama_sampler_chain_n";
    guard(F, -1, || match kind(chain) {
        Some(Kind::Chain { samplers, .. }) => samplers.len() as i32,
        _ => {
            error(F, "not a sampler chain");
            -1
        }
    })
}

/// Removes sampler `i` from the chain and gives it back to the caller (who frees it).
#[no_mangle]
pub unsafe extern "C" fn llama_sampler_chain_remove(chain: *mut Sampler, i: i32) -> *mut Sampler {
    const F: &str = "llama_sampler_chain_remove";
    guard(F, ptr::null_mut(), || match kind(chain) {
        Some(Kind::Chain { samplers, .. }) => match usize::try_from(i).ok().filter(|&i| i < samplers.len()) {
            Some(i) => samplers.remove(i),
            None => {
                error(F, &format!("index {i} is outside the chain of {}", samplers.len()));
                ptr::null_mut()
            }
        },
        _ => {
            error(F, "not a sampler chain");
            ptr::null_mut()
        }
    })
}

/// The number of samplers of a chain of this library's; None (no log line) for anything else.
pub(crate) unsafe fn llama_sampler_chain_n_quiet(chain: *const Sampler) -> Option<usize> {
    match kind(chain) {
        Some(Kind::Chain { samplers, .. }) => Some(samplers.len()),
        _ => None,
    }
}

/// A sampler's name for a log line ("?" where it has none).
pub(crate) unsafe fn name_of(s: *const Sampler) -> String {
    let name = llama_sampler_name(s);
    if name.is_null() {
        "?".into()
    } else {
        std::ffi::CStr::from_ptr(name).to_string_lossy().into_owned()
    }
}

#[no_mangle]
pub extern "C" fn llama_sampler_init_greedy() -> *mut Sampler {
    new_sampler(Kind::Greedy)
}

#[no_mangle]
pub extern "C" fn llama_sampler_init_dist(seed: u32) -> *mut Sampler {
    let seed = if seed == DEFAULT_SEED { draw_seed() } else { seed };
    new_sampler(Kind::Dist { seed, rng: Box::new(Mt19937::new(seed)) })
}

/// k <= 0 keeps every token: llama.cpp's empty sampler "?top-k" (llama-sampler.cpp).
#[no_mangle]
pub extern "C" fn llama_sampler_init_top_k(k: i32) -> *mut Sampler {
    if k <= 0 {
        return new_sampler(Kind::Empty(c"?top-k"));
    }
    new_sampler(Kind::TopK(k))
}

#[no_mangle]
pub extern "C" fn llama_sampler_init_top_p(p: f32, min_keep: usize) -> *mut Sampler {
    new_sampler(Kind::TopP { p, min_keep })
}

#[no_mangle]
pub extern "C" fn llama_sampler_init_min_p(p: f32, min_keep: usize) -> *mut Sampler {
    new_sampler(Kind::MinP { p, min_keep })
}

#[no_mangle]
pub extern "C" fn llama_sampler_init_typical(p: f32, min_keep: usize) -> *mut Sampler {
    new_sampler(Kind::Typical { p, min_keep })
}

#[no_mangle]
pub extern "C" fn llama_sampler_init_temp(t: f32) -> *mut Sampler {
    new_sampler(Kind::Temp(t))
}

/// `n_vocab` is unused (llama.cpp ignores it too); `penalty_last_n` < 0 is taken as 0. The
/// history grows with the tokens accepted, up to `penalty_last_n`: nothing is allocated from
/// `penalty_last_n` itself (llama.cpp allocates all of it at once, and INT32_MAX aborted).
#[no_mangle]
pub extern "C" fn llama_sampler_init_penalties(_n_vocab: i32, penalty_last_n: i32, penalty_repeat: f32, penalty_freq: f32, penalty_present: f32) -> *mut Sampler {
    let last_n = usize::try_from(penalty_last_n).unwrap_or(0);
    new_sampler(Kind::Penalties { last_n, repeat: penalty_repeat, freq: penalty_freq, present: penalty_present, history: VecDeque::new() })
}

#[no_mangle]
pub unsafe extern "C" fn llama_sampler_init_logit_bias(n_vocab: i32, n_logit_bias: i32, logit_bias: *const LogitBias) -> *mut Sampler {
    const F: &str = "llama_sampler_init_logit_bias";
    guard(F, ptr::null_mut(), || {
        let n = usize::try_from(n_logit_bias).unwrap_or(0);
        if n > 0 && logit_bias.is_null() {
            error(F, "logit_bias is NULL");
            return ptr::null_mut();
        }
        let biases = if n == 0 { Vec::new() } else { std::slice::from_raw_parts(logit_bias, n).to_vec() };
        if let Some(b) = biases.iter().find(|b| b.token < 0 || b.token >= n_vocab) {
            error(F, &format!("token {} is outside the vocabulary of {n_vocab}", b.token));
            return ptr::null_mut();
        }
        new_sampler(Kind::LogitBias(biases))
    })
}

/// A sampler the client defines: its vtable and state, owned by the client's `free`.
#[no_mangle]
pub extern "C" fn llama_sampler_init(iface: *const SamplerI, ctx: *mut c_void) -> *mut Sampler {
    if iface.is_null() {
        error("llama_sampler_init", "iface is NULL");
        return ptr::null_mut();
    }
    let s = Box::into_raw(Box::new(Sampler { iface, ctx }));
    if let Ok(mut made) = MADE_BY_INIT.lock() {
        made.insert(s as usize);
    }
    s
}

/// Samplers `llama_sampler_init` allocated (with a client's vtable): `llama_sampler_free`
/// frees their struct; a struct the client allocated itself is left to the client.
static MADE_BY_INIT: std::sync::Mutex<std::collections::BTreeSet<usize>> = std::sync::Mutex::new(std::collections::BTreeSet::new());

#[no_mangle]
pub unsafe extern "C" fn llama_sampler_name(s: *const Sampler) -> *const c_char {
    if s.is_null() || (*s).iface.is_null() {
        return ptr::null();
    }
    match (*(*s).iface).name {
        Some(f) => f(s),
        None => ptr::null(),
    }
}

#[no_mangle]
pub unsafe extern "C" fn llama_sampler_accept(s: *mut Sampler, token: Token) {
    guard("llama_sampler_accept", (), || {
        if s.is_null() || (*s).iface.is_null() {
            return;
        }
        if let Some(f) = (*(*s).iface).accept {
            f(s, token)
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn llama_sampler_apply(s: *mut Sampler, cur: *mut TokenDataArray) {
    guard("llama_sampler_apply", (), || {
        if s.is_null() || (*s).iface.is_null() {
            error("llama_sampler_apply", "sampler is NULL");
            if !cur.is_null() {
                (*cur).selected = -1;
            }
            return;
        }
        if let Some(f) = (*(*s).iface).apply {
            f(s, cur)
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn llama_sampler_reset(s: *mut Sampler) {
    guard("llama_sampler_reset", (), || {
        if s.is_null() || (*s).iface.is_null() {
            return;
        }
        if let Some(f) = (*(*s).iface).reset {
            f(s)
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn llama_sampler_clone(s: *const Sampler) -> *mut Sampler {
    const F: &str = "llama_sampler_clone";
    guard(F, ptr::null_mut(), || {
        if s.is_null() || (*s).iface.is_null() {
            error(F, "sampler is NULL");
            return ptr::null_mut();
        }
        match (*(*s).iface).clone {
            Some(f) => f(s),
            None => {
                error(F, "this sampler has no clone");
                ptr::null_mut()
            }
        }
    })
}

/// Frees a sampler (a chain frees what it holds); NULL is a no-op. A sampler the client made
/// itself (not through `llama_sampler_init`) gets only its `free` called.
/// Gives `dst` the state of `src`, a sampler of the same kind (llama.cpp's semantics: the
/// interface's `copy_state` when it has one, else a clone of `src` whose state replaces
/// `dst`'s). NULL, the same sampler, or samplers of different kinds (logged; llama.cpp aborts)
/// change nothing.
#[no_mangle]
pub unsafe extern "C" fn llama_sampler_copy(src: *const Sampler, dst: *mut Sampler) {
    const F: &str = "llama_sampler_copy";
    guard(F, (), || {
        if src.is_null() || dst.is_null() || ptr::eq(src, dst) || (*dst).iface.is_null() {
            return;
        }
        // This library's samplers share one interface: their kinds tell them apart.
        let same_kind = match (kind(src), kind(dst)) {
            (Some(a), Some(b)) => std::mem::discriminant(a) == std::mem::discriminant(b),
            _ => ptr::eq((*src).iface, (*dst).iface),
        };
        if !same_kind {
            error(F, "cannot copy between different sampler types");
            return;
        }
        let iface = &*(*dst).iface;
        if !iface.copy_state.is_null() {
            // SAFETY: llama.h's `void (*copy_state)(const struct llama_sampler * src, struct llama_sampler * dst)`.
            let f: unsafe extern "C" fn(*const Sampler, *mut Sampler) = std::mem::transmute(iface.copy_state);
            f(src, dst);
            return;
        }
        let tmp = llama_sampler_clone(src);
        if tmp.is_null() {
            return;
        }
        if let Some(free) = iface.free {
            free(dst);
        }
        (*dst).ctx = (*tmp).ctx;
        (*tmp).ctx = ptr::null_mut();
        // The emptied shell (a clone of a client's sampler is made by llama_sampler_init).
        release_shell(tmp);
    })
}

#[no_mangle]
pub unsafe extern "C" fn llama_sampler_free(s: *mut Sampler) {
    guard("llama_sampler_free", (), || {
        if s.is_null() {
            return;
        }
        if !(*s).iface.is_null() {
            if let Some(f) = (*(*s).iface).free {
                f(s);
            }
        }
        release_shell(s);
    })
}

/// Frees the `struct llama_sampler` itself (its state already freed) where this library
/// allocated it: its own samplers and those made by llama_sampler_init.
unsafe fn release_shell(s: *mut Sampler) {
    let ours = is_builtin(s) || MADE_BY_INIT.lock().map(|mut m| m.remove(&(s as usize))).unwrap_or(false);
    if ours {
        drop(Box::from_raw(s));
    }
}

/// The seed in use by a `dist` or mirostat sampler (the last such in a chain);
/// LLAMA_DEFAULT_SEED when none.
#[no_mangle]
pub unsafe extern "C" fn llama_sampler_get_seed(s: *const Sampler) -> u32 {
    match kind(s) {
        Some(Kind::Dist { seed, .. }) => *seed,
        Some(Kind::Mirostat(m)) => m.gen.seed_cur,
        Some(Kind::MirostatV2(m)) => m.gen.seed_cur,
        Some(Kind::Chain { samplers, .. }) => samplers
            .iter()
            .rev()
            .map(|&x| llama_sampler_get_seed(x))
            .find(|&seed| seed != DEFAULT_SEED)
            .unwrap_or(DEFAULT_SEED),
        _ => DEFAULT_SEED,
    }
}

/// Applies `s` to the logits of `ctx`'s batch index `idx`, accepts the selected token and
/// returns it. LLAMA_TOKEN_NULL (-1), logged, when there are no such logits, the chain holds a
/// sampler that could not be built, or nothing selected a token. Where a chain attached to
/// the row's sequence ran at decode (`llama_set_sampler`), as llama.cpp's: the token it
/// selected is accepted and returned, else `s` is applied to the candidates it left.
#[no_mangle]
pub unsafe extern "C" fn llama_sampler_sample(s: *mut Sampler, ctx: *mut LlamaContext, idx: i32) -> Token {
    const F: &str = "llama_sampler_sample";
    guard(F, -1, || {
        if s.is_null() {
            error(F, "sampler is NULL");
            return -1;
        }
        if is_broken(s) {
            error(F, BROKEN);
            return -1;
        }
        let mut data = match candidates_for_sampling(F, ctx, idx) {
            Some(Start::Token(token)) => {
                llama_sampler_accept(s, token);
                return token;
            }
            Some(Start::Candidates(data)) => data,
            None => return -1,
        };
        let mut cur = TokenDataArray { data: data.as_mut_ptr(), size: data.len(), selected: -1, sorted: false };
        llama_sampler_apply(s, &mut cur);
        // The array's start may have moved (XTC moves it past what it drops): read through it.
        let token = match usize::try_from(cur.selected).ok().filter(|&i| i < cur.size) {
            Some(i) => (*cur.data.add(i)).id,
            None => {
                error(F, &format!("no token selected (selected = {}): the chain needs a greedy or dist sampler", cur.selected));
                return -1;
            }
        };
        llama_sampler_accept(s, token);
        token
    })
}

/// The grammar sampler over `vocab` (the model): masks every candidate the GBNF grammar
/// `grammar_str`, from rule `grammar_root`, does not allow next. A NULL or empty grammar gives
/// a sampler that does nothing; a grammar that does not parse gives NULL (logged).
#[no_mangle]
pub unsafe extern "C" fn llama_sampler_init_grammar(vocab: *const LlamaModel, grammar_str: *const c_char, grammar_root: *const c_char) -> *mut Sampler {
    const F: &str = "llama_sampler_init_grammar";
    guard(F, ptr::null_mut(), || grammar_sampler(grammar::from_c(F, vocab, grammar_str, grammar_root, Lazy::No)))
}

/// As `llama_sampler_init_grammar`, but lazy: the grammar changes nothing until a token of
/// `trigger_tokens` is taken or the text taken contains one of `trigger_words`; it then
/// starts from that token or word.
#[no_mangle]
pub unsafe extern "C" fn llama_sampler_init_grammar_lazy(
    vocab: *const LlamaModel,
    grammar_str: *const c_char,
    grammar_root: *const c_char,
    trigger_words: *const *const c_char,
    num_trigger_words: usize,
    trigger_tokens: *const Token,
    num_trigger_tokens: usize,
) -> *mut Sampler {
    const F: &str = "llama_sampler_init_grammar_lazy";
    guard(F, ptr::null_mut(), || {
        let Some(words) = grammar::c_texts(F, "trigger_words", trigger_words, num_trigger_words) else { return ptr::null_mut() };
        let Some(tokens) = grammar::c_tokens(F, trigger_tokens, num_trigger_tokens) else { return ptr::null_mut() };
        grammar_sampler(grammar::from_c(F, vocab, grammar_str, grammar_root, Lazy::Words(words, tokens)))
    })
}

/// As `llama_sampler_init_grammar_lazy` with regular expressions: the grammar starts where
/// one of `trigger_patterns` matches the text taken (at its first non-empty group, else at
/// the match; a pattern `^...$` must match all of it). A pattern that does not compile gives
/// NULL (logged).
#[no_mangle]
pub unsafe extern "C" fn llama_sampler_init_grammar_lazy_patterns(
    vocab: *const LlamaModel,
    grammar_str: *const c_char,
    grammar_root: *const c_char,
    trigger_patterns: *const *const c_char,
    num_trigger_patterns: usize,
    trigger_tokens: *const Token,
    num_trigger_tokens: usize,
) -> *mut Sampler {
    const F: &str = "llama_sampler_init_grammar_lazy_patterns";
    guard(F, ptr::null_mut(), || {
        let Some(patterns) = grammar::c_texts(F, "trigger_patterns", trigger_patterns, num_trigger_patterns) else { return ptr::null_mut() };
        let Some(tokens) = grammar::c_tokens(F, trigger_tokens, num_trigger_tokens) else { return ptr::null_mut() };
        grammar_sampler(grammar::from_c(F, vocab, grammar_str, grammar_root, Lazy::Patterns(patterns, tokens)))
    })
}

fn grammar_sampler(state: Result<Option<GrammarSampler>, grammar::Refused>) -> *mut Sampler {
    match state {
        Ok(g) => new_sampler(Kind::Grammar(g.map(Box::new))),
        Err(grammar::Refused) => ptr::null_mut(),
    }
}

#[cfg(test)]
pub(crate) mod tests;
