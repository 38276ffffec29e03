//! Running a recording: compiling its graph (once per graph, kept) and running it on ONNX
//! Runtime, its outputs written into the tensors and KV planes that take them.

use std::ffi::{c_void, CString};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::onnx::{self, Data, Elem, Init, Io};
use super::ort;
use super::recorder::{weight_name, Recorder};
use super::{lock, Compiled, Feed, Inner, Source, TRef};
use crate::error::{Error, Result};

impl Inner {
    /// Runs the pending recording, if any: every live tensor's graph value and every pending
    /// KV row comes back to host memory. On failure the error is kept for `take_error` and
    /// the tensors hold NaN (nothing computed is ever passed off as a result).
    pub(super) fn flush(&self) {
        self.flush_reading(None)
    }

    /// `flush`, for a read of `read` (its output is the one an exported graph calls "read").
    pub(super) fn flush_reading(&self, read: Option<&TRef>) {
        let Some(rec) = self.take_recording() else { return };
        if let Err(e) = self.run(rec, read) {
            self.fail(e);
        }
    }

    /// Keeps `e` for `take_error` unless an earlier failure is kept.
    pub(super) fn fail(&self, e: Error) {
        let mut err = lock(&self.error);
        if err.is_none() {
            *err = Some(e);
        }
    }

    /// This thread's recording, taken out, if it holds anything.
    pub(super) fn take_recording(&self) -> Option<Recorder> {
        let mut st = lock(&self.state);
        let rec = st.recs.remove(&std::thread::current().id())?;
        (!rec.is_empty()).then_some(rec)
    }

    /// Drops this thread's recording unrun (a pass that failed): the tensors it would have
    /// written keep their host values (stale, never read before they are written again) and
    /// the rows it would have appended are not.
    pub(super) fn discard(&self) {
        let Some(rec) = self.take_recording() else { return };
        for w in &rec.live {
            if let Some(t) = w.upgrade() {
                lock(&t).sym = None;
            }
        }
        for (plane, ..) in &rec.kv_out {
            lock(plane).pending = None;
        }
    }

    pub(super) fn run(&self, mut rec: Recorder, read: Option<&TRef>) -> Result<()> {
        // Outputs: each live tensor's value, then each pending KV append.
        let mut outputs: Vec<Io> = Vec::new();
        let mut tensors: Vec<(TRef, usize)> = Vec::new();
        let mut roles: Vec<String> = Vec::new();
        let mut add_out = |outputs: &mut Vec<Io>, name: &str, n: usize, role: String| -> usize {
            if let Some(i) = outputs.iter().position(|o| o.name == name) {
                // One value, two uses (a layer's new keys still in the tensor that made them):
                // the manifest names the more telling one.
                if roles[i] == "activation" {
                    roles[i] = role;
                }
                return i;
            }
            outputs.push(Io { name: name.to_string(), elem: Elem::F32, dims: vec![n as i64] });
            roles.push(role);
            outputs.len() - 1
        };
        let mut nan_on_failure: Vec<TRef> = Vec::new();
        for w in &rec.live {
            let Some(t) = w.upgrade() else { continue };
            let sym = lock(&t).sym.clone();
            if let Some((name, n)) = sym {
                let role = if read.is_some_and(|r| Arc::ptr_eq(r, &t)) { "read" } else { "activation" };
                let i = add_out(&mut outputs, &name, n, role.to_string());
                tensors.push((t.clone(), i));
                nan_on_failure.push(t);
            }
        }
        let mut kvs = Vec::new();
        for (plane, k, v, rows, layer) in &rec.kv_out {
            let w = lock(plane).width;
            let ki = add_out(&mut outputs, k, rows * w, format!("new keys of layer {layer}"));
            let vi = add_out(&mut outputs, v, rows * w, format!("new values of layer {layer}"));
            kvs.push((plane.clone(), ki, vi, *rows));
        }
        // Where each output is written: the first tensor or plane rows that take it, which
        // ONNX Runtime then writes in place; any other taker gets a copy. An output that is an
        // input of the graph as it is (rows appended unchanged) is not written into a place
        // given for it: ONNX Runtime hands back its own, copied.
        let mut into: Vec<Option<*mut f32>> = vec![None; outputs.len()];
        let passed_through: Vec<bool> = outputs.iter().map(|o| rec.inputs.iter().any(|(io, _)| io.name == o.name)).collect();
        for (t, j) in &tensors {
            if into[*j].is_none() && !passed_through[*j] {
                into[*j] = Some(lock(t).host.as_mut_ptr());
            }
        }
        for (plane, ki, vi, _) in &kvs {
            let mut p = lock(plane);
            let at = p.len * p.width;
            for (i, keys) in [(*ki, true), (*vi, false)] {
                if into[i].is_none() && !passed_through[i] {
                    into[i] = Some(if keys { p.k[at..].as_mut_ptr() } else { p.v[at..].as_mut_ptr() });
                }
            }
        }
        let result = self.execute(&mut rec, &outputs, &roles, &into, |i, data| {
            let n = outputs[i].dims.iter().product::<i64>() as usize;
            let copy = |to: *mut f32| {
                if to as *const f32 != data {
                    // SAFETY: `data` holds output i's n values; `to` is a different place of
                    // at least n (a tensor as long as its value, plane rows grown for the pass).
                    unsafe { std::ptr::copy_nonoverlapping(data, to, n) };
                }
            };
            for (t, j) in &tensors {
                if *j == i {
                    let mut d = lock(t);
                    copy(d.host.as_mut_ptr());
                    d.sym = None;
                }
            }
            for (plane, ki, vi, _) in &kvs {
                let mut p = lock(plane);
                let at = p.len * p.width;
                if *ki == i {
                    copy(p.k[at..].as_mut_ptr());
                }
                if *vi == i {
                    copy(p.v[at..].as_mut_ptr());
                }
            }
        });
        // The appended rows count once both halves are in (or are dropped on failure).
        for (plane, _, _, rows) in &kvs {
            let mut p = lock(plane);
            let (at, w) = (p.len, p.width);
            if result.is_ok() {
                p.len += rows;
            } else {
                // A run that failed may have written some of them: rows past those held are
                // zeros.
                p.k[at * w..(at + rows) * w].fill(0.0);
                p.v[at * w..(at + rows) * w].fill(0.0);
            }
            p.pending = None;
        }
        if result.is_err() {
            for t in nan_on_failure {
                let mut d = lock(&t);
                if let Some((_, n)) = d.sym.take() {
                    d.host[..n].fill(f32::NAN);
                }
            }
        }
        result
    }

    /// The compiled graph of a recording with these outputs: from the cache, or compiled now
    /// (under the state lock: one compile of a shape, whichever thread asks first).
    pub(super) fn compiled(&self, rec: &Recorder, outputs: &[Io], roles: &[String]) -> Result<Arc<Compiled>> {
        let st = lock(&self.state);
        let mut inits = rec.consts.clone();
        let mut ios: Vec<Io> = rec.inputs.iter().map(|(io, _)| io.clone()).collect();
        let mut dims = Vec::new();
        for &id in &rec.weights {
            let d = weight_dims(&st.weights[id]);
            if self.weights_as_inputs {
                ios.push(Io { name: weight_name(id), elem: Elem::F32, dims: d });
                continue;
            }
            let length = d.iter().product::<i64>() as usize * 4;
            inits.push(Init { name: weight_name(id), elem: Elem::F32, dims: d.clone(), data: Data::External { location: weight_name(id), offset: 0, length } });
            dims.push(d);
        }
        drop(st);
        let bytes = onnx::model("packlm", &rec.nodes, &inits, &ios, outputs);
        let mut st = lock(&self.state);
        Ok(match st.cache.get(&bytes) {
            Some(c) => c.clone(),
            None => {
                #[cfg(test)]
                // The n-th compile from when the test set it to n fails.
                if super::tests::FAIL_COMPILE.with(|f| f.replace(f.get().saturating_sub(1)) == 1) {
                    return Err(Error::new(crate::error::Status::ErrBackendUnavailable, "the provider rejected the graph (injected by a test)"));
                }
                let externals: Vec<(String, Vec<f32>)> =
                    if self.weights_as_inputs { Vec::new() } else { rec.weights.iter().map(|&id| (weight_name(id), dequantize(&st.weights[id]))).collect() };
                let session = self.rt.session(&bytes, &self.provider, self.threads.load(Ordering::Relaxed), &externals, &dims)?;
                self.compiles.fetch_add(1, Ordering::Relaxed);
                let output_names = outputs.iter().map(|o| CString::new(o.name.as_str()).unwrap_or_default()).collect();
                let c = Arc::new(Compiled { session, output_names });
                if let Some(ex) = lock(&self.export).as_mut() {
                    ex.write(rec, outputs, roles, &st.weights)?;
                }
                st.cache.insert(bytes, c.clone());
                c
            }
        })
    }

    /// Compiles (once per graph) and runs the recording, calling `take(output index, values)`.
    pub(super) fn execute(&self, rec: &mut Recorder, outputs: &[Io], roles: &[String], into: &[Option<*mut f32>], mut take: impl FnMut(usize, *const f32)) -> Result<()> {
        if let Some(what) = &rec.stale {
            return Err(Error::new(crate::error::Status::ErrPanic, format!("internal: {what}")));
        }
        if outputs.is_empty() {
            return Ok(());
        }
        let compiled = self.compiled(rec, outputs, roles)?;
        // Inputs: host buffers wrapped, not copied (a plane's buffer is resized only by
        // `kv_append` of its own session, which is not running while this pass is).
        let mut names: Vec<CString> = rec.inputs.iter().map(|(io, _)| CString::new(io.name.as_str()).unwrap_or_default()).collect();
        // The weights, where they are inputs: the model's one f32 copy of each, made at its
        // first use and shared by every graph.
        let dense: Vec<(usize, Arc<Vec<f32>>, Vec<i64>)> = if self.weights_as_inputs {
            let mut st = lock(&self.state);
            let st = &mut *st;
            rec.weights
                .iter()
                .map(|&id| {
                    let d = weight_dims(&st.weights[id]);
                    let v = st.dense.entry(id).or_insert_with(|| Arc::new(dequantize(&st.weights[id]))).clone();
                    (id, v, d)
                })
                .collect()
        } else {
            Vec::new()
        };
        let mut guards = Vec::new();
        let mut ptrs: Vec<(*mut c_void, usize)> = Vec::new();
        let mut bytes_in = 0u64;
        for (io, feed) in rec.inputs.iter_mut() {
            let n = io.dims.iter().product::<i64>() as usize;
            match feed {
                Feed::F32(v) => {
                    ptrs.push((v.as_mut_ptr() as *mut c_void, v.len() * 4));
                    bytes_in += v.len() as u64 * 4;
                }
                Feed::I64(v) => {
                    ptrs.push((v.as_mut_ptr() as *mut c_void, v.len() * 8));
                    bytes_in += v.len() as u64 * 8;
                }
                Feed::Kv(plane, keys) => {
                    let mut p = lock(plane);
                    let ptr = if *keys { p.k.as_mut_ptr() } else { p.v.as_mut_ptr() };
                    ptrs.push((ptr as *mut c_void, n * 4));
                    if !self.host_memory {
                        bytes_in += n as u64 * 4;
                    }
                    guards.push((plane.clone(), p.len));
                    drop(p);
                }
            }
        }
        let mut values = Vec::with_capacity(ptrs.len() + dense.len());
        for ((io, _), &(p, b)) in rec.inputs.iter().zip(&ptrs) {
            // SAFETY: the feeds (owned by `rec`) and the planes' buffers (not resized while a
            // graph runs: only `kv_append` grows them, under the state lock this holds) outlive
            // the values, dropped at the end of this call.
            values.push(unsafe { self.rt.tensor(p, b, &io.dims, io.elem as i32) }?);
        }
        for (id, v, d) in &dense {
            names.push(CString::new(weight_name(*id)).unwrap_or_default());
            // SAFETY: `dense` holds the buffer (an Arc) past the run; ONNX Runtime only reads it.
            values.push(unsafe { self.rt.tensor(v.as_ptr() as *mut c_void, v.len() * 4, d, Elem::F32 as i32) }?);
        }
        let inputs: Vec<(&std::ffi::CStr, ort::Value)> = names.iter().map(|n| n.as_c_str()).zip(values).collect();
        let outs: Vec<ort::Output> = compiled
            .output_names
            .iter()
            .zip(outputs)
            .zip(into)
            .map(|((n, o), &into)| ort::Output { name: n.as_c_str(), len: o.dims.iter().product::<i64>() as usize, into })
            .collect();
        // Bytes that cross between host memory and the provider's: on the cpu provider, whose
        // memory is the host's, the inputs but the weights and the planes (read in place) and
        // the outputs but the new KV rows (written in place into the planes); on a device
        // provider, everything fed and taken but the weights (initializers, placed once).
        let mut bytes_out = 0u64;
        for (o, role) in outs.iter().zip(roles) {
            if !(self.host_memory && role.starts_with("new ")) {
                bytes_out += o.len as u64 * 4;
            }
        }
        let r = self.rt.run(&compiled.session, &inputs, &outs, &mut take);
        drop(guards);
        self.runs.fetch_add(1, Ordering::Relaxed);
        self.bytes_in.fetch_add(bytes_in, Ordering::Relaxed);
        self.bytes_out.fetch_add(bytes_out, Ordering::Relaxed);
        r
    }
}

/// A weight's shape in a graph.
pub(super) fn weight_dims(s: &Source) -> Vec<i64> {
    match s {
        Source::Matrix(w) => vec![w.rows() as i64, w.cols() as i64],
        Source::Vector(v) => vec![v.len() as i64],
    }
}

/// A weight as the f32 values a graph's initializer holds.
pub(super) fn dequantize(s: &Source) -> Vec<f32> {
    match s {
        Source::Vector(v) => v.as_ref().clone(),
        Source::Matrix(w) => {
            let cols = w.cols();
            let mut out = vec![0.0f32; w.rows() * cols];
            for (r, row) in out.chunks_exact_mut(cols).enumerate() {
                w.row_f32(r, row);
            }
            out
        }
    }
}
