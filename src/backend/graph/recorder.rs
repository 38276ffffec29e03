//! The recording of one thread's ops: nodes, constants, inputs and the values each tensor
//! holds, until the graph runs (see the module above).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use super::onnx::{Attr, Data, Elem, Init, Io, Node};
use super::{Feed, PlaneRef, TData, TRef};
use crate::backend::Tensor;

/// The graph being recorded.
#[derive(Default)]
pub(super) struct Recorder {
    pub(super) nodes: Vec<Node>,
    pub(super) consts: Vec<Init>,
    pub(super) const_names: HashMap<(Vec<u8>, Vec<i64>, u8), String>,
    pub(super) inputs: Vec<(Io, Feed)>,
    /// Position inputs by value: a pass's start is one input however many ops read it.
    pub(super) positions: HashMap<usize, String>,
    /// What each input is ("token ids", "position", "keys of layer 3", "activation").
    pub(super) roles: Vec<String>,
    pub(super) weights: Vec<usize>,
    pub(super) live: Vec<Weak<Mutex<TData>>>,
    /// (plane, keys' value, values' value, rows, layer)
    pub(super) kv_out: Vec<(PlaneRef, String, String, usize, usize)>,
    pub(super) next: usize,
    /// A value read that the engine said it would not read (`Backend::forget`): the run fails.
    pub(super) stale: Option<String>,
}

impl Recorder {
    pub(super) fn is_empty(&self) -> bool {
        self.nodes.is_empty() && self.live.is_empty() && self.kv_out.is_empty()
    }
    pub(super) fn name(&mut self, prefix: &str) -> String {
        self.next += 1;
        format!("{prefix}{}", self.next)
    }
    pub(super) fn node(&mut self, op: &'static str, inputs: &[&str], attrs: Vec<(&'static str, Attr)>) -> String {
        let out = self.name("t");
        self.nodes.push(Node { op, inputs: inputs.iter().map(|s| s.to_string()).collect(), outputs: vec![out.clone()], attrs });
        out
    }
    /// A node with two outputs (TopK's values and indices).
    pub(super) fn node2(&mut self, op: &'static str, inputs: &[&str], attrs: Vec<(&'static str, Attr)>) -> (String, String) {
        let (a, b) = (self.name("t"), self.name("t"));
        self.nodes.push(Node { op, inputs: inputs.iter().map(|s| s.to_string()).collect(), outputs: vec![a.clone(), b.clone()], attrs });
        (a, b)
    }
    pub(super) fn op(&mut self, op: &'static str, inputs: &[&str]) -> String {
        self.node(op, inputs, Vec::new())
    }
    pub(super) fn constant(&mut self, elem: Elem, bytes: Vec<u8>, dims: Vec<i64>) -> String {
        let key = (bytes, dims, elem as u8);
        if let Some(n) = self.const_names.get(&key) {
            return n.clone();
        }
        let name = self.name("c");
        self.consts.push(Init { name: name.clone(), elem, dims: key.1.clone(), data: Data::Inline(key.0.clone()) });
        self.const_names.insert(key, name.clone());
        name
    }
    pub(super) fn f32s(&mut self, v: &[f32], dims: &[i64]) -> String {
        self.constant(Elem::F32, v.iter().flat_map(|x| x.to_le_bytes()).collect(), dims.to_vec())
    }
    pub(super) fn scalar(&mut self, v: f32) -> String {
        self.f32s(&[v], &[])
    }
    pub(super) fn i64s(&mut self, v: &[i64]) -> String {
        self.constant(Elem::I64, v.iter().flat_map(|x| x.to_le_bytes()).collect(), vec![v.len() as i64])
    }
    pub(super) fn range(&mut self, n: usize) -> String {
        self.i64s(&(0..n as i64).collect::<Vec<_>>())
    }
    pub(super) fn reshape(&mut self, x: &str, dims: &[i64]) -> String {
        let d = self.i64s(dims);
        self.op("Reshape", &[x, &d])
    }
    pub(super) fn flat(&mut self, x: &str) -> String {
        self.reshape(x, &[-1])
    }
    pub(super) fn slice(&mut self, x: &str, axis: i64, from: usize, to: usize) -> String {
        let (s, e, a) = (self.i64s(&[from as i64]), self.i64s(&[to as i64]), self.i64s(&[axis]));
        self.op("Slice", &[x, &s, &e, &a])
    }
    pub(super) fn concat(&mut self, parts: &[&str], axis: i64) -> String {
        self.node("Concat", parts, vec![("axis", Attr::Int(axis))])
    }
    pub(super) fn input(&mut self, elem: Elem, dims: Vec<i64>, feed: Feed) -> String {
        self.input_as("activation", elem, dims, feed)
    }
    /// An input, with what it is for an exported graph's reader (`role`).
    pub(super) fn input_as(&mut self, role: &str, elem: Elem, dims: Vec<i64>, feed: Feed) -> String {
        let name = self.name("in");
        self.inputs.push((Io { name: name.clone(), elem, dims }, feed));
        self.roles.push(role.to_string());
        name
    }
    /// A position (an i64 scalar input, shape [1]), one input per value.
    pub(super) fn position(&mut self, p: usize) -> String {
        if let Some(n) = self.positions.get(&p) {
            return n.clone();
        }
        let n = self.input_as("position", Elem::I64, vec![1], Feed::I64(vec![p as i64]));
        self.positions.insert(p, n.clone());
        n
    }
    pub(super) fn weight(&mut self, id: usize) -> String {
        if !self.weights.contains(&id) {
            self.weights.push(id);
        }
        weight_name(id)
    }

    /// The graph value of the first `n` elements of `t` (flat): its recorded value, or its host
    /// values as an input.
    pub(super) fn get(&mut self, t: &Tensor, n: usize) -> String {
        let t = t.get::<TRef>();
        let d = t.lock().unwrap_or_else(|e| e.into_inner());
        match &d.sym {
            Some((name, m)) if *m == n => name.clone(),
            Some((name, m)) if *m > n => {
                let name = name.clone();
                drop(d);
                self.slice(&name, 0, 0, n)
            }
            Some((name, m)) => {
                // Values past what the graph wrote: the host's (stale by the engine's rule that
                // an op writes its rows before any op reads them, but kept exact all the same).
                let (name, m) = (name.clone(), *m);
                let tail = d.host[m..n].to_vec();
                drop(d);
                let tail = self.input(Elem::F32, vec![(n - m) as i64], Feed::F32(tail));
                self.concat(&[&name, &tail], 0)
            }
            None => {
                if d.forgotten && self.stale.is_none() {
                    self.stale = Some(format!("an op read {n} values the engine said were not read again"));
                }
                let v = d.host[..n].to_vec();
                drop(d);
                self.input(Elem::F32, vec![n as i64], Feed::F32(v))
            }
        }
    }

    /// The first `n` elements of `t` are now the value `name` (flat).
    pub(super) fn set(&mut self, t: &mut Tensor, name: String, n: usize) {
        let r = t.get::<TRef>();
        let mut d = r.lock().unwrap_or_else(|e| e.into_inner());
        d.sym = Some((name, n));
        d.forgotten = false;
        drop(d);
        if !self.live.iter().any(|w| w.as_ptr() == Arc::as_ptr(r)) {
            self.live.push(Arc::downgrade(r));
        }
    }

    /// A matrix product (`Gemm` with B transposed when `gemm`, else `MatMul`) of `a`, whose
    /// shape is `a_dims` (its rows the second-to-last), and `b`. One row is computed as the first
    /// of two (a zero row beside it): ONNX Runtime's CPU kernels take another path for a single
    /// row, whose sums differ in their last bits from the same row's in any larger product, and
    /// a row's bits must not depend on its pass.
    pub(super) fn product(&mut self, a: &str, a_dims: &[i64], b: &str, gemm: bool) -> String {
        let axis = a_dims.len() - 2;
        let one = a_dims[axis] == 1;
        let a = if one {
            let zeros = self.f32s(&vec![0.0; a_dims.iter().product::<i64>() as usize], a_dims);
            self.concat(&[a, &zeros], axis as i64)
        } else {
            a.to_string()
        };
        let y = if gemm { self.node("Gemm", &[&a, b], vec![("transB", Attr::Int(1))]) } else { self.op("MatMul", &[&a, b]) };
        if one {
            self.slice(&y, axis as i64, 0, 1)
        } else {
            y
        }
    }

    /// `tanh(x / cap) * cap`, as the host computes it.
    pub(super) fn softcap(&mut self, x: &str, cap: f32) -> String {
        let c = self.scalar(cap);
        let d = self.op("Div", &[x, &c]);
        let t = self.op("Tanh", &[&d]);
        self.op("Mul", &[&t, &c])
    }

    /// `x` reshaped to `[rows, width]`, RMS-normalized per row (`eps`), times `w` if given.
    pub(super) fn rms(&mut self, x: &str, w: Option<&str>, eps: f32, rows: usize, width: usize) -> String {
        let x = self.reshape(x, &[rows as i64, width as i64]);
        let sq = self.op("Mul", &[&x, &x]);
        let mean = self.node("ReduceMean", &[&sq], vec![("axes", Attr::Ints(vec![-1])), ("keepdims", Attr::Int(1))]);
        let e = self.scalar(eps);
        let m = self.op("Add", &[&mean, &e]);
        let s = self.op("Sqrt", &[&m]);
        let inv = self.op("Reciprocal", &[&s]);
        let y = self.op("Mul", &[&x, &inv]);
        let y = match w {
            Some(w) => self.op("Mul", &[w, &y]),
            None => y,
        };
        self.flat(&y)
    }
}

pub(super) fn weight_name(id: usize) -> String {
    format!("w{id}")
}

