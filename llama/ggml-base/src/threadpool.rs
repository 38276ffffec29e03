//! `ggml_threadpool_params_default`, `_init` and `_match` (ggml.h): the parameter struct a
//! program fills before asking for a threadpool. Filling and comparing it is pure; no
//! threadpool is made here (packlm runs on its own worker pool).

/// GGML_MAX_N_THREADS.
pub const MAX_N_THREADS: usize = 512;

/// `struct ggml_threadpool_params`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ThreadpoolParams {
    /// Cores a thread may run on; all false: the default affinity.
    pub cpumask: [bool; MAX_N_THREADS],
    pub n_threads: i32,
    /// `enum ggml_sched_priority` (0: GGML_SCHED_PRIO_NORMAL).
    pub prio: i32,
    /// 0 (no polling) to 100 (aggressive polling).
    pub poll: u32,
    pub strict_cpu: bool,
    pub paused: bool,
}

/// ggml.c's defaults: `n_threads` threads, normal priority, polling 50, no strict placement,
/// not paused, the default affinity.
#[no_mangle]
pub unsafe extern "C" fn ggml_threadpool_params_init(p: *mut ThreadpoolParams, n_threads: i32) {
    if let Some(p) = p.as_mut() {
        *p = ggml_threadpool_params_default(n_threads);
    }
}

#[no_mangle]
pub extern "C" fn ggml_threadpool_params_default(n_threads: i32) -> ThreadpoolParams {
    ThreadpoolParams { cpumask: [false; MAX_N_THREADS], n_threads, prio: 0, poll: 50, strict_cpu: false, paused: false }
}

/// Whether two parameter sets ask for the same threadpool: n_threads, prio, poll, strict_cpu
/// and cpumask equal (`paused` is not compared, as in ggml.c). False when either is NULL.
#[no_mangle]
pub unsafe extern "C" fn ggml_threadpool_params_match(p0: *const ThreadpoolParams, p1: *const ThreadpoolParams) -> bool {
    match (p0.as_ref(), p1.as_ref()) {
        (Some(a), Some(b)) => {
            a.n_threads == b.n_threads && a.prio == b.prio && a.poll == b.poll && a.strict_cpu == b.strict_cpu && a.cpumask == b.cpumask
        }
        _ => false,
    }
}
