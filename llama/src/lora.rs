//! LoRA adapters: `llama_adapter_lora_init` (a llama.cpp adapter GGUF, or a PEFT folder), its
//! metadata, `llama_adapter_lora_free`, the aLoRA getters, and a context's adapters:
//! `llama_set_adapters_lora` (llama.h of 0.3.36) and the older single-adapter forms
//! (`llama_set_adapter_lora`, `llama_rm_adapter_lora`, `llama_clear_adapter_lora`) that
//! programs built against an earlier llama.h call.
//!
//! An adapter is packlm's `Adapter`: applied at run time to the rows of the sessions it is set
//! on, never merged into the weights. packlm sets adapters on an empty session only, so that
//! every key and value a session holds was computed under one set. A context keeps that rule:
//! all its sequences run under the context's set, always. Setting a new set on a context whose
//! sequences hold positions therefore recomputes those positions under the new set, one pass
//! over each such sequence's tokens (logged as a warning, with the count), and returns 0, as
//! llama.cpp does. llama.cpp itself applies the new set from the next decode on and keeps the
//! keys and values already computed under the old one, so a sequence's later logits differ
//! from llama.cpp's there: here they are those of a context that ran the whole sequence under
//! the new set. Refusing (-1) or waiting for the next memory clear were the alternatives; a
//! client that switches adapters between requests while keeping a cached prefix (llama.cpp's
//! server does, and ignores the return value) would then get its reply from the old adapters.

use std::ffi::{c_char, CStr};
use std::io::Read;
use std::path::Path;
use std::ptr;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::abi::Token;
use crate::adapter::{Lora, Rows, Sequence};
use crate::context::{hold, LlamaContext};
use crate::log::{self, error, guard, Level};
use crate::model::{model_ref, write_c_string, LlamaModel};

/// `struct llama_adapter_lora`: owned through a Box by its model's list until
/// `llama_adapter_lora_free` (or the model's free) drops it. Immutable: safe to share between
/// threads. A context that uses it holds its own reference to the weights, so freeing the
/// handle while a context uses it is safe here (llama.cpp: undefined).
pub struct LlamaLora {
    /// Unique for the process: two handles made at one address at different times differ.
    id: u64,
    model: *const LlamaModel,
    lora: Lora,
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// One adapter of a context's set.
#[derive(Clone)]
pub(crate) struct Entry {
    id: u64,
    pub(crate) lora: Lora,
    pub(crate) scale: f32,
}

/// The key llama.cpp reads an aLoRA's invocation tokens from (llama-adapter.cpp).
const ALORA_KEY: &str = "adapter.alora.invocation_tokens";

/// Loads a LoRA adapter for `model`: a llama.cpp adapter GGUF (general.type "adapter",
/// adapter.type "lora", the base's architecture, A and B of each adapted projection), or a
/// PEFT folder. NULL, logged, for a missing file, another base (an architecture or tensor
/// shape that does not fit the model: the log names it), or an aLoRA (activated LoRA, whose
/// invocation tokens packlm does not honour). The model frees it if the client does not.
#[no_mangle]
pub unsafe extern "C" fn llama_adapter_lora_init(model: *mut LlamaModel, path_lora: *const c_char) -> *mut LlamaLora {
    const F: &str = "llama_adapter_lora_init";
    guard(F, ptr::null_mut(), || {
        let Some(m) = model_ref(F, model) else { return ptr::null_mut() };
        if path_lora.is_null() {
            error(F, "path_lora is NULL");
            return ptr::null_mut();
        }
        let Ok(path) = CStr::from_ptr(path_lora).to_str() else {
            error(F, "path_lora is not UTF-8");
            return ptr::null_mut();
        };
        match has_gguf_key(Path::new(path), ALORA_KEY) {
            Ok(false) => {}
            Ok(true) => {
                error(F, &format!("{path}: an aLoRA ({ALORA_KEY}): its activation by invocation tokens is not supported"));
                return ptr::null_mut();
            }
            Err(why) => {
                error(F, &format!("{path}: {why}"));
                return ptr::null_mut();
            }
        }
        match m.engine.open_lora(Path::new(path)) {
            Ok(lora) => {
                let handle = Box::into_raw(Box::new(LlamaLora { id: NEXT_ID.fetch_add(1, Ordering::Relaxed), model, lora }));
                m.loras.lock().unwrap_or_else(|e| e.into_inner()).push(handle as usize);
                handle
            }
            Err(e) => {
                error(F, &format!("{path}: {e}"));
                ptr::null_mut()
            }
        }
    })
}

/// Frees an adapter (NULL: no-op); a context using it keeps its own reference to the weights.
/// Adapters not freed are freed with their model, after which they must not be freed.
#[no_mangle]
pub unsafe extern "C" fn llama_adapter_lora_free(adapter: *mut LlamaLora) {
    guard("llama_adapter_lora_free", (), || {
        if adapter.is_null() {
            return;
        }
        if let Some(m) = (*adapter).model.as_ref() {
            m.loras.lock().unwrap_or_else(|e| e.into_inner()).retain(|&a| a != adapter as usize);
        }
        drop(Box::from_raw(adapter));
    })
}

/// Frees the adapters of a model being freed (`llama_model_free`).
pub(crate) unsafe fn free_all(addresses: Vec<usize>) {
    for a in addresses {
        drop(Box::from_raw(a as *mut LlamaLora));
    }
}

unsafe fn lora_ref<'a>(f: &str, p: *const LlamaLora) -> Option<&'a LlamaLora> {
    if p.is_null() {
        error(f, "adapter is NULL");
        return None;
    }
    Some(&*p)
}

/// Writes `text` (None: cleared, -1) as llama.cpp's meta getters do.
unsafe fn meta_out(text: Option<&str>, buf: *mut c_char, size: usize) -> i32 {
    match text {
        Some(t) => write_c_string(t, buf, size),
        None => {
            if !buf.is_null() && size > 0 {
                *buf = 0;
            }
            -1
        }
    }
}

/// The adapter's GGUF value under `key`, as text (llama.cpp's `gguf_kv_to_str`; no arrays);
/// -1 with `buf` cleared when absent.
#[no_mangle]
pub unsafe extern "C" fn llama_adapter_meta_val_str(adapter: *const LlamaLora, key: *const c_char, buf: *mut c_char, size: usize) -> i32 {
    const F: &str = "llama_adapter_meta_val_str";
    guard(F, -1, || {
        let Some(a) = lora_ref(F, adapter) else { return meta_out(None, buf, size) };
        if key.is_null() {
            error(F, "key is NULL");
            return meta_out(None, buf, size);
        }
        let key = CStr::from_ptr(key).to_string_lossy();
        meta_out(a.lora.metadata().iter().find(|kv| kv.0 == key).map(|kv| kv.1.as_str()), buf, size)
    })
}

/// The number of the adapter's key/values (arrays left out, as llama.cpp).
#[no_mangle]
pub unsafe extern "C" fn llama_adapter_meta_count(adapter: *const LlamaLora) -> i32 {
    const F: &str = "llama_adapter_meta_count";
    guard(F, -1, || lora_ref(F, adapter).map_or(-1, |a| a.lora.metadata().len() as i32))
}

/// Key `i` of the adapter's key/values (in the file's order); -1, `buf` cleared, out of range.
#[no_mangle]
pub unsafe extern "C" fn llama_adapter_meta_key_by_index(adapter: *const LlamaLora, i: i32, buf: *mut c_char, size: usize) -> i32 {
    meta_by_index("llama_adapter_meta_key_by_index", adapter, i, buf, size, |kv| &kv.0)
}

/// Value `i` of the adapter's key/values as text; -1, `buf` cleared, out of range.
#[no_mangle]
pub unsafe extern "C" fn llama_adapter_meta_val_str_by_index(adapter: *const LlamaLora, i: i32, buf: *mut c_char, size: usize) -> i32 {
    meta_by_index("llama_adapter_meta_val_str_by_index", adapter, i, buf, size, |kv| &kv.1)
}

unsafe fn meta_by_index(f: &str, adapter: *const LlamaLora, i: i32, buf: *mut c_char, size: usize, pick: fn(&(String, String)) -> &String) -> i32 {
    guard(f, -1, || {
        let Some(a) = lora_ref(f, adapter) else { return meta_out(None, buf, size) };
        meta_out(usize::try_from(i).ok().and_then(|i| a.lora.metadata().get(i)).map(|kv| pick(kv).as_str()), buf, size)
    })
}

/// 0: an aLoRA is refused at init, so no adapter has invocation tokens (llama.cpp's value for
/// a plain LoRA, and for NULL).
#[no_mangle]
pub extern "C" fn llama_adapter_get_alora_n_invocation_tokens(_adapter: *const LlamaLora) -> u64 {
    0
}

/// NULL: no adapter has invocation tokens (an empty vector's data in llama.cpp).
#[no_mangle]
pub extern "C" fn llama_adapter_get_alora_invocation_tokens(_adapter: *const LlamaLora) -> *const Token {
    ptr::null()
}

/// Adapter `i` of a call, checked: None, logged, for NULL, an adapter of another model, or a
/// scale that is not finite.
unsafe fn checked<'a>(f: &str, ctx: &LlamaContext, i: usize, a: *const LlamaLora, scale: f32) -> Option<&'a LlamaLora> {
    let a = lora_ref(f, a)?;
    if a.model != ctx.model {
        error(f, &format!("adapter {i} was loaded for another model"));
        return None;
    }
    if !scale.is_finite() {
        error(f, &format!("adapter {i}'s scale {scale} is not finite"));
        return None;
    }
    Some(a)
}

/// The set of `list` (adapter, scale): zero scales dropped and a repeated adapter kept once,
/// with its first scale (llama.cpp inserts into a map). None, logged, when an entry is not
/// `checked`.
unsafe fn entries(f: &str, ctx: &LlamaContext, list: &[(*const LlamaLora, f32)]) -> Option<Vec<Entry>> {
    let mut out: Vec<Entry> = Vec::with_capacity(list.len());
    for (i, &(a, scale)) in list.iter().enumerate() {
        let a = checked(f, ctx, i, a, scale)?;
        if scale != 0.0 && !out.iter().any(|e| e.id == a.id) {
            out.push(Entry { id: a.id, lora: a.lora.clone(), scale });
        }
    }
    Some(out)
}

/// Replaces `seqs` (the context's sequences) with one made by `make` from each, the positions
/// each holds recomputed in the new one under the new `what` (adapters, a control vector) with a
/// warning naming them, so that every position a sequence holds was computed under one setting
/// (llama.cpp keeps the keys and values computed before). Swapped in only when all are made and
/// recomputed: true; false, logged, with `seqs` unchanged.
pub(crate) unsafe fn remake_sequences<E: std::fmt::Display>(f: &str, ctx: *mut LlamaContext, seqs: &mut Vec<Sequence>, what: &str, make: impl Fn(&Sequence) -> Result<Sequence, E>) -> bool {
    let engine = &(*(*ctx).model).engine;
    let mut fresh = Vec::with_capacity(seqs.len());
    for s in seqs.iter() {
        match make(s) {
            Ok(n) => fresh.push(n),
            Err(e) => {
                error(f, &e.to_string());
                return false;
            }
        }
    }
    let held: Vec<(usize, Vec<u32>)> = seqs.iter().enumerate().filter(|(_, s)| s.n_past() > 0).map(|(i, s)| (i, s.tokens().to_vec())).collect();
    if !held.is_empty() {
        let list: Vec<String> = held.iter().map(|(i, t)| format!("{i} ({} positions)", t.len())).collect();
        log::log(
            Level::Warn,
            &format!(
                "{f}: sequences {} hold positions: they are recomputed under the new {what}, so that every position a sequence holds was computed under one setting (llama.cpp keeps the keys and values computed before)",
                list.join(", ")
            ),
        );
        let mut items: Vec<(&mut Sequence, &[u32], Rows)> = Vec::with_capacity(held.len());
        let mut rest: &mut [Sequence] = &mut fresh;
        let mut base = 0;
        for (i, tokens) in &held {
            let (s, tail) = std::mem::take(&mut rest)[i - base..].split_first_mut().expect("a held sequence");
            rest = tail;
            base = i + 1;
            items.push((s, tokens, Rows::None));
        }
        (*ctx).settings.apply_threads(f, engine, held.iter().map(|(_, t)| t.len()).sum());
        if let Err(e) = Sequence::step_many(&mut items) {
            error(f, &format!("recomputing the held positions under the new {what}: {e}; the context is unchanged"));
            return false;
        }
    }
    *seqs = fresh;
    true
}

/// Whether two sets hold the same adapters with the same scales, in any order (llama.cpp's
/// `adapters_lora_are_same`).
fn same(a: &[Entry], b: &[Entry]) -> bool {
    a.len() == b.len() && a.iter().all(|x| b.iter().any(|y| y.id == x.id && y.scale == x.scale))
}

/// Makes `set` the context's adapters (see the module's doc): 0; -1, logged, with nothing
/// changed, when a sequence cannot be recomputed under it.
unsafe fn set(f: &str, ctx: *mut LlamaContext, set: impl FnOnce(&LlamaContext, &[Entry]) -> Option<Vec<Entry>>) -> i32 {
    guard(f, -1, || {
        let Some(mut c) = hold(f, ctx) else { return -1 };
        let Some(new) = set(&*ctx, &c.loras) else { return -1 };
        if same(&new, &c.loras) {
            return 0;
        }
        let engine = &(*(*ctx).model).engine;
        let list: Vec<(Lora, f32)> = new.iter().map(|e| (e.lora.clone(), e.scale)).collect();
        // The context's control vector (cvec.rs) stays with the new adapters.
        let made = remake_sequences(f, ctx, &mut c.seqs, "adapters", |s| {
            Sequence::new(engine, s.n_ctx()).and_then(|mut n| {
                n.set_adapters(&list)?;
                n.set_control_vector(s.control_vector().as_ref())?;
                Ok(n)
            })
        });
        if !made {
            return -1;
        }
        c.loras = new;
        0
    })
}

/// Sets the context's adapters to `adapters` with `scales` (n each; NULL with n = 0 clears
/// them), replacing the set it had; unchanged when the set is the same. Returns 0; -1,
/// logged, with nothing changed, for NULL arrays with n > 0 (llama.cpp asserts), a NULL
/// adapter, one of another model, or a scale that is not finite. Sequences holding positions
/// are recomputed under the new set (see the module's doc).
#[no_mangle]
pub unsafe extern "C" fn llama_set_adapters_lora(ctx: *mut LlamaContext, adapters: *const *const LlamaLora, n_adapters: usize, scales: *const f32) -> i32 {
    const F: &str = "llama_set_adapters_lora";
    if n_adapters > 0 && (adapters.is_null() || scales.is_null()) {
        error(F, &format!("{n_adapters} adapters with NULL adapters or scales"));
        return -1;
    }
    let list: Vec<(*const LlamaLora, f32)> = (0..n_adapters).map(|i| (*adapters.add(i), *scales.add(i))).collect();
    set(F, ctx, |c, _| entries(F, c, &list))
}

/// The older llama.h's single-adapter call: adds `adapter` with `scale` to the context's set,
/// or changes its scale (0 removes it). As `llama_set_adapters_lora` otherwise.
#[no_mangle]
pub unsafe extern "C" fn llama_set_adapter_lora(ctx: *mut LlamaContext, adapter: *const LlamaLora, scale: f32) -> i32 {
    const F: &str = "llama_set_adapter_lora";
    set(F, ctx, |c, now| {
        let a = checked(F, c, 0, adapter, scale)?;
        let mut new: Vec<Entry> = now.iter().filter(|x| x.id != a.id).cloned().collect();
        if scale != 0.0 {
            new.push(Entry { id: a.id, lora: a.lora.clone(), scale });
        }
        Some(new)
    })
}

/// The older llama.h's removal of one adapter from the context's set: 0; -1 when the context
/// does not have it.
#[no_mangle]
pub unsafe extern "C" fn llama_rm_adapter_lora(ctx: *mut LlamaContext, adapter: *const LlamaLora) -> i32 {
    const F: &str = "llama_rm_adapter_lora";
    set(F, ctx, |_, now| {
        let a = lora_ref(F, adapter)?;
        if !now.iter().any(|x| x.id == a.id) {
            error(F, "the context does not have this adapter");
            return None;
        }
        Some(now.iter().filter(|x| x.id != a.id).cloned().collect())
    })
}

/// The older llama.h's removal of every adapter from the context's set.
#[no_mangle]
pub unsafe extern "C" fn llama_clear_adapter_lora(ctx: *mut LlamaContext) {
    set("llama_clear_adapter_lora", ctx, |_, _| Some(Vec::new()));
}

/// Whether the GGUF file at `path` has metadata key `key` (of any type); false for a path that
/// is not a GGUF file (a PEFT folder; packlm reports what else is wrong). Reads the header and
/// key/values only, each length checked against the file's size.
fn has_gguf_key(path: &Path, key: &str) -> Result<bool, String> {
    if !path.is_file() {
        return Ok(false);
    }
    let file = std::fs::File::open(path).map_err(|e| e.to_string())?;
    let size = file.metadata().map_err(|e| e.to_string())?.len();
    let mut r = GgufHead { r: std::io::BufReader::new(file), size };
    let mut magic = [0u8; 4];
    if r.r.read_exact(&mut magic).is_err() || &magic != b"GGUF" {
        return Ok(false);
    }
    let version = r.u32()?;
    if version < 2 {
        return Ok(false);
    }
    let _n_tensors = r.u64()?;
    let n_kv = r.u64()?;
    for _ in 0..n_kv {
        if r.string()? == key.as_bytes() {
            return Ok(true);
        }
        let ty = r.u32()?;
        r.skip_value(ty, 0)?;
    }
    Ok(false)
}

/// A reader of a GGUF file's header and key/values.
struct GgufHead {
    r: std::io::BufReader<std::fs::File>,
    size: u64,
}

impl GgufHead {
    fn bytes(&mut self, n: u64) -> Result<Vec<u8>, String> {
        if n > self.size {
            return Err(format!("a GGUF length of {n} bytes is more than the file's {}", self.size));
        }
        let mut b = vec![0u8; n as usize];
        self.r.read_exact(&mut b).map_err(|_| "the GGUF header is cut short".to_string())?;
        Ok(b)
    }
    /// Reads past `n` bytes without keeping them.
    fn skip(&mut self, n: u64) -> Result<(), String> {
        let got = std::io::copy(&mut (&mut self.r).take(n), &mut std::io::sink()).map_err(|e| e.to_string())?;
        if got != n {
            return Err("the GGUF header is cut short".into());
        }
        Ok(())
    }
    fn u32(&mut self) -> Result<u32, String> {
        let b = self.bytes(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn u64(&mut self) -> Result<u64, String> {
        let b = self.bytes(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(&b);
        Ok(u64::from_le_bytes(a))
    }
    fn string(&mut self) -> Result<Vec<u8>, String> {
        let n = self.u64()?;
        self.bytes(n)
    }
    /// Skips a value of GGUF type `ty` (an array's elements one by one; arrays of arrays
    /// nested at most a few deep).
    fn skip_value(&mut self, ty: u32, depth: u32) -> Result<(), String> {
        let fixed = match ty {
            0 | 1 | 7 => 1,
            2 | 3 => 2,
            4..=6 => 4,
            10..=12 => 8,
            8 => {
                let n = self.u64()?;
                return self.skip(n);
            }
            9 if depth < 4 => {
                let elem = self.u32()?;
                let n = self.u64()?;
                return match elem {
                    8 | 9 => (0..n).try_for_each(|_| self.skip_value(elem, depth + 1)),
                    _ => {
                        let each = match elem {
                            0 | 1 | 7 => 1,
                            2 | 3 => 2,
                            4..=6 => 4,
                            10..=12 => 8,
                            _ => return Err(format!("GGUF array element type {elem} is unknown")),
                        };
                        self.skip(n.checked_mul(each).ok_or("a GGUF array's size overflows")?)
                    }
                };
            }
            _ => return Err(format!("GGUF value type {ty} is unknown")),
        };
        self.skip(fixed)
    }
}
