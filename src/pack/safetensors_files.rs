//! HF safetensors weights of a pack folder, memory-mapped: `model.safetensors`, or the shards
//! named by `model.safetensors.index.json`. The header is parsed and validated by the
//! `safetensors` crate; tensors stay in the map (no copy, no conversion at load).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;

use memmap2::Mmap;
use safetensors::{Dtype, SafeTensors};

use crate::error::{Error, Result};
use crate::pack::files::{self, FileKind};
use crate::pack::tensor::{TensorBytes, WeightTensor};
use crate::quant::WeightType;

/// Loads every tensor of the folder's safetensors files, keyed by name.
pub fn load_folder(dir: &Path) -> Result<BTreeMap<String, WeightTensor>> {
    let single = dir.join("model.safetensors");
    let index = dir.join("model.safetensors.index.json");
    let files: Vec<String> = if files::exists(&index) {
        shard_names(&index)?
    } else if files::exists(&single) {
        vec!["model.safetensors".to_string()]
    } else {
        return Err(Error::new(
            crate::Status::ErrIo,
            format!("{}: no model.safetensors or model.safetensors.index.json", dir.display()),
        ));
    };
    let mut out = BTreeMap::new();
    for f in files {
        load_file(&dir.join(&f), &mut out)?;
    }
    Ok(out)
}

/// The distinct shard file names of an index's `weight_map`.
fn shard_names(index: &Path) -> Result<Vec<String>> {
    let text = files::read_bytes(index, FileKind::SafetensorsIndex)?;
    let v: serde_json::Value = serde_json::from_slice(&text)
        .map_err(|e| Error::format(format!("{}: {e}", index.display())))?;
    let map = v.get("weight_map").and_then(|m| m.as_object()).ok_or_else(|| {
        Error::format(format!("{}: no \"weight_map\" object", index.display()))
    })?;
    let mut names = BTreeSet::new();
    for (tensor, file) in map {
        let file = file.as_str().ok_or_else(|| {
            Error::format(format!("{}: weight_map[{tensor}] is not a string", index.display()))
        })?;
        // A shard name is a plain file name beside the index; refuse paths that leave the folder.
        if file.contains('/') || file.contains('\\') || file == ".." {
            return Err(Error::format(format!(
                "{}: weight_map[{tensor}] = {file:?} is not a file name",
                index.display()
            )));
        }
        names.insert(file.to_string());
    }
    Ok(names.into_iter().collect())
}

pub(crate) fn load_file(path: &Path, out: &mut BTreeMap<String, WeightTensor>) -> Result<()> {
    // A regular file only: a FIFO would block, a device would map without end.
    let file = files::open_regular(path)?;
    // SAFETY: the map is read-only; packs are not expected to change while open (the same
    // assumption every mmap-based loader makes; documented in the header for packlm_model_open).
    let map = unsafe { Mmap::map(&file) }.map_err(|e| Error::io(path, e))?;
    let map = Arc::new(map);
    let (header_len, meta) = SafeTensors::read_metadata(&map[..])
        .map_err(|e| Error::format(format!("{}: safetensors header: {e}", path.display())))?;
    let data_start = 8 + header_len;
    // `read_metadata` checks that offsets are contiguous and that the header's byte count matches
    // the file; each tensor's byte count is checked against its shape again in WeightTensor::new.
    for (name, info) in meta.tensors() {
        let ty = match info.dtype {
            Dtype::F32 => WeightType::F32,
            Dtype::F16 => WeightType::F16,
            Dtype::BF16 => WeightType::BF16,
            other => {
                return Err(Error::unsupported(format!(
                    "{}: tensor {name} has dtype {other:?}; supported: F32, F16, BF16",
                    path.display()
                )))
            }
        };
        let (b, e) = info.data_offsets;
        let offset = data_start
            .checked_add(b)
            .filter(|_| e >= b && data_start.checked_add(e).is_some_and(|end| end <= map.len()))
            .ok_or_else(|| {
                Error::format(format!("{}: tensor {name} lies outside the file", path.display()))
            })?;
        let bytes = TensorBytes::Mapped { map: map.clone(), offset, len: e - b };
        let shape = if info.shape.is_empty() { vec![1] } else { info.shape.clone() };
        let t = WeightTensor::new(name.clone(), ty, shape, bytes)
            .map_err(|e| Error::new(e.status, format!("{}: {}", path.display(), e.message)))?;
        if out.insert(name.clone(), t).is_some() {
            return Err(Error::format(format!("{}: tensor {name} appears twice", path.display())));
        }
    }
    Ok(())
}
