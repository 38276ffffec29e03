//! ONNX Runtime's C API, loaded at run time (`dlopen`): packlm builds and runs without it, and
//! the graph backend says why it is unavailable when it cannot be loaded.
//!
//! The C API is one table of function pointers (`OrtApi`) whose order only ever grows at the
//! end, so a function's index is fixed once released. The indices below are those of
//! onnxruntime_c_api.h; the table is asked for at `API_VERSION` (ONNX Runtime 1.17, the first
//! release with everything used here), which every later runtime still serves.

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::ptr::{null, null_mut};
use std::sync::{Arc, Mutex};

use crate::error::{Error, Result, Status};

/// The API version asked of the runtime (ONNX Runtime 1.17).
const API_VERSION: u32 = 17;

/// Indices into `OrtApi` (onnxruntime_c_api.h, in declaration order).
mod ix {
    pub const GET_ERROR_MESSAGE: usize = 2;
    pub const CREATE_ENV: usize = 3;
    pub const RUN: usize = 9;
    pub const CREATE_SESSION_OPTIONS: usize = 10;
    pub const SET_GRAPH_OPTIMIZATION_LEVEL: usize = 23;
    pub const SET_INTRA_OP_NUM_THREADS: usize = 24;
    pub const SET_INTER_OP_NUM_THREADS: usize = 25;
    pub const CREATE_TENSOR_WITH_DATA: usize = 49;
    pub const GET_TENSOR_MUTABLE_DATA: usize = 51;
    pub const CREATE_CPU_MEMORY_INFO: usize = 69;
    pub const RELEASE_ENV: usize = 92;
    pub const RELEASE_STATUS: usize = 93;
    pub const RELEASE_MEMORY_INFO: usize = 94;
    pub const RELEASE_SESSION: usize = 95;
    pub const RELEASE_VALUE: usize = 96;
    pub const RELEASE_SESSION_OPTIONS: usize = 100;
    pub const GET_AVAILABLE_PROVIDERS: usize = 125;
    pub const RELEASE_AVAILABLE_PROVIDERS: usize = 126;
    pub const ADD_SESSION_CONFIG_ENTRY: usize = 130;
    pub const CREATE_SESSION_FROM_ARRAY_PREPACKED: usize = 169;
    pub const CREATE_PREPACKED_WEIGHTS_CONTAINER: usize = 166;
    pub const RELEASE_PREPACKED_WEIGHTS_CONTAINER: usize = 167;
    pub const ADD_EXTERNAL_INITIALIZERS: usize = 210;
    pub const APPEND_EXECUTION_PROVIDER: usize = 216;
}

type Status_ = *mut c_void;
type P = *mut c_void;

#[repr(C)]
struct ApiBase {
    get_api: unsafe extern "C" fn(u32) -> *const P,
    get_version_string: unsafe extern "C" fn() -> *const c_char,
}

/// The environment variable naming the runtime library when the open options do not.
pub const LIBRARY_ENV: &str = "PACKLM_ONNXRUNTIME";

/// Execution providers by the names packlm takes: (name, ONNX Runtime's provider name as
/// `GetAvailableProviders` lists it, the name `SessionOptionsAppendExecutionProvider` takes).
pub const PROVIDERS: &[(&str, &str, &str)] = &[
    ("cpu", "CPUExecutionProvider", ""),
    ("openvino", "OpenVINOExecutionProvider", "OpenVINO"),
    ("vitisai", "VitisAIExecutionProvider", "VitisAI"),
    ("qnn", "QNNExecutionProvider", "QNN"),
    ("coreml", "CoreMLExecutionProvider", "CoreML"),
    ("cuda", "CUDAExecutionProvider", "CUDA"),
    ("dml", "DmlExecutionProvider", "DML"),
];

/// A loaded runtime: its function table, one environment and a CPU memory description.
pub struct Runtime {
    lib: *mut c_void,
    api: *const P,
    env: P,
    cpu: P,
    pub version: String,
    pub path: String,
}

// SAFETY: ONNX Runtime's environment, sessions (Run) and memory info are documented as safe
// to use from several threads; the pointers are only released in Drop.
unsafe impl Send for Runtime {}
unsafe impl Sync for Runtime {}

fn unavailable(msg: String) -> Error {
    Error::new(Status::ErrBackendUnavailable, msg)
}

impl Runtime {
    /// Loads the runtime from `path`, or from `PACKLM_ONNXRUNTIME`, or by the plain library
    /// name through the system's search path.
    ///
    /// A runtime is loaded once per process and path and kept (ONNX Runtime's environment is
    /// one per process, and unloading its library is unsafe while its threads live).
    pub fn load(path: Option<&str>) -> Result<Arc<Runtime>> {
        static LOADED: Mutex<Vec<Arc<Runtime>>> = Mutex::new(Vec::new());
        let from_env = std::env::var(LIBRARY_ENV).ok().filter(|s| !s.is_empty());
        let path = path.map(str::to_string).or(from_env).unwrap_or_else(|| default_name().to_string());
        let mut loaded = LOADED.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(rt) = loaded.iter().find(|r| r.path == path) {
            return Ok(rt.clone());
        }
        let rt = Runtime::load_new(path)?;
        loaded.push(rt.clone());
        Ok(rt)
    }

    fn load_new(path: String) -> Result<Arc<Runtime>> {
        let c = CString::new(path.clone()).map_err(|_| Error::invalid(format!("onnxruntime library path {path:?} holds a NUL byte")))?;
        // SAFETY: dlopen with a valid C string; the handle is closed in Drop.
        let lib = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if lib.is_null() {
            // SAFETY: dlerror returns a thread-local C string or NULL.
            let why = unsafe { libc::dlerror() };
            let why = if why.is_null() { String::new() } else { unsafe { CStr::from_ptr(why) }.to_string_lossy().into_owned() };
            return Err(unavailable(format!(
                "the npu backend needs ONNX Runtime's library, and {path:?} could not be loaded ({why}); name it with the open option or {LIBRARY_ENV}"
            )));
        }
        let close = |e: Error| {
            // SAFETY: lib came from dlopen above and nothing of it is kept.
            unsafe { libc::dlclose(lib) };
            Err(e)
        };
        // SAFETY: dlsym on a live handle with a valid C string.
        let sym = unsafe { libc::dlsym(lib, c"OrtGetApiBase".as_ptr()) };
        if sym.is_null() {
            return close(unavailable(format!("{path:?} is not ONNX Runtime's library: it has no OrtGetApiBase")));
        }
        // SAFETY: OrtGetApiBase's C signature: no arguments, a pointer to the base table.
        let get_base: unsafe extern "C" fn() -> *const ApiBase = unsafe { std::mem::transmute(sym) };
        let base = unsafe { get_base() };
        if base.is_null() {
            return close(unavailable(format!("{path:?}: OrtGetApiBase returned NULL")));
        }
        // SAFETY: the base table's two functions, as declared by the C API.
        let version = unsafe { CStr::from_ptr(((*base).get_version_string)()) }.to_string_lossy().into_owned();
        let api = unsafe { ((*base).get_api)(API_VERSION) };
        if api.is_null() {
            return close(unavailable(format!("ONNX Runtime {version} at {path:?} does not serve C API version {API_VERSION}: the npu backend needs ONNX Runtime 1.17 or newer")));
        }
        let mut rt = Runtime { lib, api, env: null_mut(), cpu: null_mut(), version, path };
        let mut env = null_mut();
        // SAFETY (all calls through `rt`): each function is called with the argument types of
        // its C declaration, at the index of that declaration.
        unsafe {
            let f: unsafe extern "C" fn(c_int, *const c_char, *mut P) -> Status_ = rt.f(ix::CREATE_ENV);
            rt.check(f(3, c"packlm".as_ptr(), &mut env), "creating the environment")?;
            rt.env = env;
            let mut cpu = null_mut();
            let f: unsafe extern "C" fn(c_int, c_int, *mut P) -> Status_ = rt.f(ix::CREATE_CPU_MEMORY_INFO);
            rt.check(f(0, 0, &mut cpu), "describing host memory")?;
            rt.cpu = cpu;
        }
        Ok(Arc::new(rt))
    }

    /// Function `i` of the table, as type `F` (a function pointer type).
    unsafe fn f<F: Copy>(&self, i: usize) -> F {
        let p = unsafe { *self.api.add(i) };
        debug_assert!(!p.is_null());
        unsafe { std::mem::transmute_copy(&p) }
    }

    /// Ok for a NULL status; otherwise its message (naming `what` was being done) as an error,
    /// the status released.
    fn check(&self, s: Status_, what: &str) -> Result<()> {
        if s.is_null() {
            return Ok(());
        }
        // SAFETY: a non-NULL status from a C API call; released once here.
        let msg = unsafe {
            let get: unsafe extern "C" fn(Status_) -> *const c_char = self.f(ix::GET_ERROR_MESSAGE);
            let m = CStr::from_ptr(get(s)).to_string_lossy().into_owned();
            let rel: unsafe extern "C" fn(Status_) = self.f(ix::RELEASE_STATUS);
            rel(s);
            m
        };
        Err(Error::new(Status::ErrBackendUnavailable, format!("ONNX Runtime, {what}: {msg}")))
    }

    /// The execution providers this runtime was built with (ONNX Runtime's names).
    pub fn available_providers(&self) -> Result<Vec<String>> {
        let mut out: *mut *mut c_char = null_mut();
        let mut n: c_int = 0;
        // SAFETY: C API calls as declared; the list is released by its own function.
        unsafe {
            let f: unsafe extern "C" fn(*mut *mut *mut c_char, *mut c_int) -> Status_ = self.f(ix::GET_AVAILABLE_PROVIDERS);
            self.check(f(&mut out, &mut n), "listing execution providers")?;
            let names = (0..n as usize).map(|i| CStr::from_ptr(*out.add(i)).to_string_lossy().into_owned()).collect();
            let rel: unsafe extern "C" fn(*mut *mut c_char, c_int) -> Status_ = self.f(ix::RELEASE_AVAILABLE_PROVIDERS);
            self.check(rel(out, n), "releasing the provider list")?;
            Ok(names)
        }
    }

    /// A tensor over `data` (not copied).
    ///
    /// # Safety
    /// `data` spans `bytes` bytes of the element type and outlives the value, in place.
    pub unsafe fn tensor(&self, data: *mut c_void, bytes: usize, dims: &[i64], elem: i32) -> Result<Value<'_>> {
        let mut v = null_mut();
        // SAFETY: C API call as declared; `data` spans `bytes` bytes by the caller's contract.
        unsafe {
            let f: unsafe extern "C" fn(P, *mut c_void, usize, *const i64, usize, c_int, *mut P) -> Status_ = self.f(ix::CREATE_TENSOR_WITH_DATA);
            self.check(f(self.cpu, data, bytes, dims.as_ptr(), dims.len(), elem, &mut v), "wrapping a tensor")?;
        }
        Ok(Value { rt: self, v })
    }

    /// Compiles `model` (ONNX bytes) for `provider` with `options`, its external initializers
    /// given as (name, data) pairs: ONNX Runtime copies or repacks them while the session is
    /// made, so they need only live through this call.
    pub fn session(&self, model: &[u8], provider: &Provider, threads: usize, externals: &[(String, Vec<f32>)], dims: &[Vec<i64>]) -> Result<Session> {
        // SAFETY: C API calls as declared; every object made here is released on every path
        // (`Guard`), the session by `Session`'s Drop.
        unsafe {
            let mut so = null_mut();
            let f: unsafe extern "C" fn(*mut P) -> Status_ = self.f(ix::CREATE_SESSION_OPTIONS);
            self.check(f(&mut so), "creating session options")?;
            let _so = Guard(self, so, ix::RELEASE_SESSION_OPTIONS);
            let f: unsafe extern "C" fn(P, c_int) -> Status_ = self.f(ix::SET_INTRA_OP_NUM_THREADS);
            self.check(f(so, threads as c_int), "setting threads")?;
            let f: unsafe extern "C" fn(P, c_int) -> Status_ = self.f(ix::SET_INTER_OP_NUM_THREADS);
            self.check(f(so, 1), "setting threads")?;
            let f: unsafe extern "C" fn(P, c_int) -> Status_ = self.f(ix::SET_GRAPH_OPTIMIZATION_LEVEL);
            self.check(f(so, 99), "setting the optimization level")?;
            // No spinning worker threads between passes: the engine runs other work there.
            let f: unsafe extern "C" fn(P, *const c_char, *const c_char) -> Status_ = self.f(ix::ADD_SESSION_CONFIG_ENTRY);
            self.check(f(so, c"session.intra_op.allow_spinning".as_ptr(), c"0".as_ptr()), "setting spinning")?;
            if !provider.append_name.is_empty() {
                let keys: Vec<CString> = provider.options.iter().map(|(k, _)| CString::new(k.as_str()).unwrap_or_default()).collect();
                let vals: Vec<CString> = provider.options.iter().map(|(_, v)| CString::new(v.as_str()).unwrap_or_default()).collect();
                let kp: Vec<*const c_char> = keys.iter().map(|c| c.as_ptr()).collect();
                let vp: Vec<*const c_char> = vals.iter().map(|c| c.as_ptr()).collect();
                let name = CString::new(provider.append_name).unwrap_or_default();
                let f: unsafe extern "C" fn(P, *const c_char, *const *const c_char, *const *const c_char, usize) -> Status_ = self.f(ix::APPEND_EXECUTION_PROVIDER);
                let s = f(so, name.as_ptr(), kp.as_ptr(), vp.as_ptr(), kp.len());
                if let Err(e) = self.check(s, &format!("adding execution provider {}", provider.name)) {
                    return Err(Error::new(Status::ErrBackendUnavailable, e.message));
                }
            }
            let mut values = Vec::with_capacity(externals.len());
            for ((_, data), d) in externals.iter().zip(dims) {
                // SAFETY: `externals` outlives `values` (dropped in this call).
                values.push(self.tensor(data.as_ptr() as *mut c_void, data.len() * 4, d, 1)?);
            }
            let names: Vec<CString> = externals.iter().map(|(n, _)| CString::new(n.as_str()).unwrap_or_default()).collect();
            let np: Vec<*const c_char> = names.iter().map(|c| c.as_ptr()).collect();
            let vp: Vec<*const c_void> = values.iter().map(|v| v.v as *const c_void).collect();
            if !np.is_empty() {
                let f: unsafe extern "C" fn(P, *const *const c_char, *const *const c_void, usize) -> Status_ = self.f(ix::ADD_EXTERNAL_INITIALIZERS);
                self.check(f(so, np.as_ptr(), vp.as_ptr(), np.len()), "adding the weights")?;
            }
            let mut session = null_mut();
            let f: unsafe extern "C" fn(P, *const c_void, usize, P, P, *mut P) -> Status_ = self.f(ix::CREATE_SESSION_FROM_ARRAY_PREPACKED);
            let s = f(self.env, model.as_ptr() as *const c_void, model.len(), so, provider.prepacked.0, &mut session);
            if let Err(e) = self.check(s, &format!("compiling a graph for provider {}", provider.name)) {
                return Err(Error::new(Status::ErrBackendUnavailable, e.message));
            }
            drop(values);
            Ok(Session { rt: self as *const Runtime, s: session })
        }
    }

    /// Runs `session` on the named inputs and calls `take(i, data)` with each output's values
    /// (`outputs[i].len` of them): in the output's own place where it has one, else in memory
    /// of ONNX Runtime's, valid during the call.
    pub fn run(&self, session: &Session, inputs: &[(&CStr, Value)], outputs: &[Output], mut take: impl FnMut(usize, *const f32)) -> Result<()> {
        let in_names: Vec<*const c_char> = inputs.iter().map(|(n, _)| n.as_ptr()).collect();
        let in_vals: Vec<*const c_void> = inputs.iter().map(|(_, v)| v.v as *const c_void).collect();
        let out_names: Vec<*const c_char> = outputs.iter().map(|o| o.name.as_ptr()).collect();
        // Outputs with a place of their own are values over it, which ONNX Runtime writes.
        let mut bound = Vec::with_capacity(outputs.len());
        for o in outputs {
            bound.push(match o.into {
                // SAFETY: the caller's contract (`Output::into`).
                Some(p) => Some(unsafe { self.tensor(p as *mut c_void, o.len * 4, &[o.len as i64], 1) }?),
                None => None,
            });
        }
        let mut outs: Vec<P> = bound.iter().map(|b| b.as_ref().map_or(null_mut(), |v| v.v)).collect();
        // SAFETY: C API calls as declared; each value ONNX Runtime made is released after
        // `take` has seen it; its length is what the graph declared for it (`take` gets a
        // pointer to the caller's expected length, checked by the caller's shapes).
        unsafe {
            let f: unsafe extern "C" fn(P, *const c_void, *const *const c_char, *const *const c_void, usize, *const *const c_char, usize, *mut P) -> Status_ = self.f(ix::RUN);
            let s = f(session.s, null(), in_names.as_ptr(), in_vals.as_ptr(), in_vals.len(), out_names.as_ptr(), out_names.len(), outs.as_mut_ptr());
            let guards: Vec<Guard> = outs.iter().zip(&bound).map(|(&o, b)| Guard(self, if b.is_some() { null_mut() } else { o }, ix::RELEASE_VALUE)).collect();
            self.check(s, "running a graph")?;
            for (i, &o) in outs.iter().enumerate() {
                let mut p: *mut c_void = null_mut();
                let f: unsafe extern "C" fn(P, *mut *mut c_void) -> Status_ = self.f(ix::GET_TENSOR_MUTABLE_DATA);
                self.check(f(o, &mut p), "reading an output")?;
                take(i, p as *const f32);
            }
            drop(guards);
        }
        Ok(())
    }

    /// A container that lets sessions of one model share the weights they repack.
    pub fn prepacked(&self) -> Result<Prepacked> {
        let mut c = null_mut();
        // SAFETY: C API call as declared; released by Prepacked's Drop.
        unsafe {
            let f: unsafe extern "C" fn(*mut P) -> Status_ = self.f(ix::CREATE_PREPACKED_WEIGHTS_CONTAINER);
            self.check(f(&mut c), "creating the shared weights container")?;
        }
        Ok(Prepacked(c, self as *const Runtime))
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        // SAFETY: objects made in `load`, released once; the library is closed last. A runtime
        // is dropped only after every session and value made from it (they hold an Arc).
        unsafe {
            if !self.cpu.is_null() {
                let f: unsafe extern "C" fn(P) = self.f(ix::RELEASE_MEMORY_INFO);
                f(self.cpu);
            }
            if !self.env.is_null() {
                let f: unsafe extern "C" fn(P) = self.f(ix::RELEASE_ENV);
                f(self.env);
            }
            // The library stays loaded: ONNX Runtime's own threads and static destructors may
            // still refer to it, and unloading it is what its documentation advises against.
            let _ = self.lib;
        }
    }
}

fn default_name() -> &'static str {
    if cfg!(target_os = "macos") {
        "libonnxruntime.dylib"
    } else if cfg!(windows) {
        "onnxruntime.dll"
    } else {
        "libonnxruntime.so"
    }
}

/// Releases an object with the table's release function `2` when dropped.
struct Guard<'a>(&'a Runtime, P, usize);

impl Drop for Guard<'_> {
    fn drop(&mut self) {
        if !self.1.is_null() {
            // SAFETY: a release function of the table, on an object made by the runtime.
            unsafe {
                let f: unsafe extern "C" fn(P) = self.0.f(self.2);
                f(self.1);
            }
        }
    }
}

/// An output of a run: its name, its length (f32 values), and where it is to be written, if
/// the caller has a place for it: ONNX Runtime then writes it there (on the cpu provider, in
/// place) instead of into memory of its own.
pub struct Output<'a> {
    pub name: &'a CStr,
    pub len: usize,
    /// `len` f32 values the caller keeps valid, and reads or writes nowhere else, for the run.
    pub into: Option<*mut f32>,
}

/// An input value (over caller memory), released when dropped.
pub struct Value<'a> {
    rt: &'a Runtime,
    v: P,
}

impl Drop for Value<'_> {
    fn drop(&mut self) {
        // SAFETY: a value made by `Runtime::tensor`, released once.
        unsafe {
            let f: unsafe extern "C" fn(P) = self.rt.f(ix::RELEASE_VALUE);
            f(self.v);
        }
    }
}

/// A compiled graph.
pub struct Session {
    rt: *const Runtime,
    s: P,
}

// SAFETY: ONNX Runtime sessions may be run from any thread (and concurrently).
unsafe impl Send for Session {}
unsafe impl Sync for Session {}

impl Drop for Session {
    fn drop(&mut self) {
        // SAFETY: the runtime outlives its sessions (the backend holds both, sessions first).
        unsafe {
            let f: unsafe extern "C" fn(P) = (*self.rt).f(ix::RELEASE_SESSION);
            f(self.s);
        }
    }
}

/// The shared weights container of one model's sessions.
pub struct Prepacked(P, *const Runtime);

// SAFETY: only passed to session creation, which the backend serializes.
unsafe impl Send for Prepacked {}
unsafe impl Sync for Prepacked {}

impl Drop for Prepacked {
    fn drop(&mut self) {
        // SAFETY: released after every session that used it (the backend's field order).
        unsafe {
            let f: unsafe extern "C" fn(P) = (*self.1).f(ix::RELEASE_PREPACKED_WEIGHTS_CONTAINER);
            f(self.0);
        }
    }
}

/// The execution provider a backend compiles for, with its options.
pub struct Provider {
    pub name: String,
    pub append_name: &'static str,
    pub options: Vec<(String, String)>,
    pub prepacked: Prepacked,
}

impl Provider {
    /// Provider `name` (packlm's names, `PROVIDERS`) with `options` ("key=value" pairs
    /// separated by ';'), checked against what the runtime was built with.
    pub fn new(rt: &Runtime, name: &str, options: &str) -> Result<Provider> {
        let Some(&(_, ort_name, append_name)) = PROVIDERS.iter().find(|p| p.0 == name) else {
            let known: Vec<&str> = PROVIDERS.iter().map(|p| p.0).collect();
            return Err(unavailable(format!("execution provider {name:?} is not one packlm knows ({})", known.join(", "))));
        };
        let available = rt.available_providers()?;
        if !available.iter().any(|a| a == ort_name) {
            return Err(unavailable(format!(
                "execution provider {name:?} ({ort_name}) is not in ONNX Runtime {} at {:?}; it has {}",
                rt.version,
                rt.path,
                available.join(", ")
            )));
        }
        let mut opts = Vec::new();
        for kv in options.split(';').map(str::trim).filter(|s| !s.is_empty()) {
            let Some((k, v)) = kv.split_once('=') else {
                return Err(Error::invalid(format!("provider option {kv:?} is not key=value")));
            };
            opts.push((k.trim().to_string(), v.trim().to_string()));
        }
        if append_name.is_empty() && !opts.is_empty() {
            return Err(Error::invalid(format!("the cpu provider takes no options (given {options:?})")));
        }
        Ok(Provider { name: name.to_string(), append_name, options: opts, prepacked: rt.prepacked()? })
    }
}
