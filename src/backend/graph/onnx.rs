//! An ONNX model written from scratch: the few protobuf messages of onnx.proto a captured graph
//! needs (ModelProto, GraphProto, NodeProto, AttributeProto, TensorProto, ValueInfoProto), in
//! protobuf's wire format. Field numbers are onnx.proto's; nothing here parses.

/// ONNX element types (TensorProto.DataType).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Elem {
    F32 = 1,
    I64 = 7,
    Bool = 9,
}

/// Protobuf wire-format writer.
#[derive(Default, Clone)]
pub struct Pb(pub Vec<u8>);

impl Pb {
    fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.0.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.0.push(v as u8);
    }
    fn key(&mut self, field: u32, wire: u32) {
        self.varint(((field as u64) << 3) | wire as u64);
    }
    pub fn int(&mut self, field: u32, v: i64) {
        self.key(field, 0);
        self.varint(v as u64);
    }
    pub fn bytes(&mut self, field: u32, b: &[u8]) {
        self.key(field, 2);
        self.varint(b.len() as u64);
        self.0.extend_from_slice(b);
    }
    pub fn str(&mut self, field: u32, s: &str) {
        self.bytes(field, s.as_bytes());
    }
    pub fn msg(&mut self, field: u32, m: &Pb) {
        self.bytes(field, &m.0);
    }
    pub fn f32(&mut self, field: u32, v: f32) {
        self.key(field, 5);
        self.0.extend_from_slice(&v.to_le_bytes());
    }
}

/// One attribute value of a node.
#[derive(Clone, Debug)]
pub enum Attr {
    Int(i64),
    Float(f32),
    Ints(Vec<i64>),
}

/// A node: `op` (in the default domain, or `domain`) from `inputs` to `outputs`.
#[derive(Clone, Debug)]
pub struct Node {
    pub op: &'static str,
    pub inputs: Vec<String>,
    pub outputs: Vec<String>,
    pub attrs: Vec<(&'static str, Attr)>,
}

impl Node {
    fn write(&self, pb: &mut Pb) {
        for i in &self.inputs {
            pb.str(1, i);
        }
        for o in &self.outputs {
            pb.str(2, o);
        }
        pb.str(4, self.op);
        for (name, a) in &self.attrs {
            let mut ap = Pb::default();
            ap.str(1, name);
            match a {
                Attr::Float(f) => {
                    ap.f32(2, *f);
                    ap.int(20, 1);
                }
                Attr::Int(i) => {
                    ap.int(3, *i);
                    ap.int(20, 2);
                }
                Attr::Ints(v) => {
                    for i in v {
                        ap.int(8, *i);
                    }
                    ap.int(20, 7);
                }
            }
            pb.msg(5, &ap);
        }
    }
}

/// Where an initializer's bytes are: in the model, or in an external file (by name, offset and
/// length) that the runtime is handed separately or that lies beside an exported model.
#[derive(Clone, Debug)]
pub enum Data {
    Inline(Vec<u8>),
    External { location: String, offset: usize, length: usize },
}

/// A tensor of the graph's initializers.
#[derive(Clone, Debug)]
pub struct Init {
    pub name: String,
    pub elem: Elem,
    pub dims: Vec<i64>,
    pub data: Data,
}

impl Init {
    fn write(&self, pb: &mut Pb) {
        for d in &self.dims {
            pb.int(1, *d);
        }
        pb.int(2, self.elem as i64);
        pb.str(8, &self.name);
        match &self.data {
            Data::Inline(b) => pb.bytes(9, b),
            Data::External { location, offset, length } => {
                for (k, v) in [("location", location.clone()), ("offset", offset.to_string()), ("length", length.to_string())] {
                    let mut e = Pb::default();
                    e.str(1, k);
                    e.str(2, &v);
                    pb.msg(13, &e);
                }
                pb.int(14, 1);
            }
        }
    }
}

/// A graph input or output: name, element type and static shape.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Io {
    pub name: String,
    pub elem: Elem,
    pub dims: Vec<i64>,
}

impl Io {
    fn write(&self, pb: &mut Pb) {
        pb.str(1, &self.name);
        let mut shape = Pb::default();
        for d in &self.dims {
            let mut dim = Pb::default();
            dim.int(1, *d);
            shape.msg(1, &dim);
        }
        let mut tensor = Pb::default();
        tensor.int(1, self.elem as i64);
        tensor.msg(2, &shape);
        let mut ty = Pb::default();
        ty.msg(1, &tensor);
        pb.msg(2, &ty);
    }
}

/// The opset the captured graphs use.
pub const OPSET: i64 = 17;

/// A whole model: one graph of `nodes` over `inputs` and `inits`, giving `outputs`.
pub fn model(name: &str, nodes: &[Node], inits: &[Init], inputs: &[Io], outputs: &[Io]) -> Vec<u8> {
    let mut g = Pb::default();
    for n in nodes {
        let mut np = Pb::default();
        n.write(&mut np);
        g.msg(1, &np);
    }
    g.str(2, name);
    for i in inits {
        let mut ip = Pb::default();
        i.write(&mut ip);
        g.msg(5, &ip);
    }
    for i in inputs {
        let mut ip = Pb::default();
        i.write(&mut ip);
        g.msg(11, &ip);
    }
    for o in outputs {
        let mut op = Pb::default();
        o.write(&mut op);
        g.msg(12, &op);
    }
    let mut m = Pb::default();
    m.int(1, 8); // ir_version 8 (opset 17's)
    m.str(2, "packlm");
    m.str(3, env!("CARGO_PKG_VERSION"));
    let mut opset = Pb::default();
    opset.str(1, "");
    opset.int(2, OPSET);
    m.msg(8, &opset);
    m.msg(7, &g);
    m.0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Varints as protobuf's encoding guide gives them (150 -> 96 01; 300 -> ac 02), and a
    /// negative int64 as ten bytes (two's complement).
    #[test]
    fn varints_are_protobufs() {
        let mut p = Pb::default();
        p.int(1, 150);
        assert_eq!(p.0, [0x08, 0x96, 0x01]);
        let mut p = Pb::default();
        p.int(2, 300);
        assert_eq!(p.0, [0x10, 0xac, 0x02]);
        let mut p = Pb::default();
        p.int(1, -1);
        assert_eq!(p.0.len(), 11);
        assert_eq!(p.0[10], 0x01);
    }
}
