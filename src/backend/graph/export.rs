//! `GraphOptions::export`: each graph written to a folder as it is compiled.

use std::collections::HashMap;

use super::onnx::{self, Data, Elem, Init, Io};
use super::recorder::{weight_name, Recorder};
use super::run::{dequantize, weight_dims};
use super::Source;
use crate::error::{Error, Result};

/// The graphs written so far by `GraphOptions::export`.
pub(super) struct Export {
    dir: std::path::PathBuf,
    weights: std::fs::File,
    /// Weight id -> (offset, length) in weights.bin.
    written: HashMap<usize, (usize, usize)>,
    end: usize,
    manifest: Vec<serde_json::Value>,
}

impl Export {
    pub(super) fn new(dir: &std::path::Path) -> Result<Export> {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        let path = dir.join("weights.bin");
        let weights = std::fs::File::create(&path).map_err(|e| Error::io(&path, e))?;
        Ok(Export { dir: dir.to_path_buf(), weights, written: HashMap::new(), end: 0, manifest: Vec::new() })
    }

    /// Writes one compiled graph: its weights not yet in weights.bin appended, the model file
    /// named by its order and shape, and the manifest rewritten.
    pub(super) fn write(&mut self, rec: &Recorder, outputs: &[Io], roles: &[String], weights: &[Source]) -> Result<()> {
        use std::io::Write;
        let mut inits = rec.consts.clone();
        for &id in &rec.weights {
            let (offset, length) = match self.written.get(&id) {
                Some(&w) => w,
                None => {
                    let bytes: Vec<u8> = dequantize(&weights[id]).iter().flat_map(|v| v.to_le_bytes()).collect();
                    let path = self.dir.join("weights.bin");
                    self.weights.write_all(&bytes).map_err(|e| Error::io(&path, e))?;
                    let w = (self.end, bytes.len());
                    self.end += bytes.len();
                    self.written.insert(id, w);
                    w
                }
            };
            let dims = weight_dims(&weights[id]);
            inits.push(Init { name: weight_name(id), elem: Elem::F32, dims, data: Data::External { location: "weights.bin".into(), offset, length } });
        }
        let ios: Vec<Io> = rec.inputs.iter().map(|(io, _)| io.clone()).collect();
        let rows = rec.inputs.iter().zip(&rec.roles).find(|(_, r)| *r == "token ids").map_or(0, |((io, _), _)| io.dims[0]);
        let kv = rec.inputs.iter().zip(&rec.roles).find(|(_, r)| r.starts_with("keys of")).map_or(0, |((io, _), _)| io.dims[0]);
        let name = format!("graph{}_rows{rows}_kv{kv}.onnx", self.manifest.len());
        let path = self.dir.join(&name);
        std::fs::write(&path, onnx::model("packlm", &rec.nodes, &inits, &ios, outputs)).map_err(|e| Error::io(&path, e))?;
        let io_json = |ios: &[Io], roles: &[String]| -> Vec<serde_json::Value> {
            ios.iter()
                .zip(roles)
                .map(|(io, role)| serde_json::json!({"name": io.name, "type": if io.elem == Elem::I64 { "int64" } else { "float32" }, "shape": io.dims, "is": role}))
                .collect()
        };
        self.manifest.push(serde_json::json!({"file": name, "rows": rows, "kv_rows": kv, "inputs": io_json(&ios, &rec.roles), "outputs": io_json(outputs, roles)}));
        let path = self.dir.join("graphs.json");
        let text = serde_json::to_string_pretty(&serde_json::json!({"graphs": self.manifest})).unwrap_or_default();
        std::fs::write(&path, text + "\n").map_err(|e| Error::io(&path, e))
    }
}

