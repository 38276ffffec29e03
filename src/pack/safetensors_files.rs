//! HF safetensors weights of a pack folder, memory-mapped: `model.safetensors`, or the shards
//! named by `model.safetensors.index.json`. The header is parsed and validated by the
//! `safetensors` crate; tensors stay in the map (no copy, no conversion at load), except
//! transformers' MXFP4 checkpoints (`quant_method` "mxfp4", as gpt-oss ships): each
//! `<name>_blocks` (u8, (..., groups, 16)) and `<name>_scales` (u8, (..., groups)) pair becomes
//! one MXFP4 tensor `<name>` (..., groups * 32) in GGUF's block layout (`mxfp4_from_blocks`).

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
    let (mut out, mut bytes) = (BTreeMap::new(), BTreeMap::new());
    for f in files {
        load_into(&dir.join(&f), &mut out, Some(&mut bytes))?;
    }
    mxfp4_pairs(bytes, &mut out, dir)?;
    Ok(out)
}

/// A u8 tensor of a folder: its shape and bytes (an MXFP4 pair's half).
type ByteTensors = BTreeMap<String, (Vec<usize>, TensorBytes)>;

/// Each `<name>_blocks` / `<name>_scales` pair as the MXFP4 tensor `<name>`; a u8 tensor of no
/// pair is refused by name.
fn mxfp4_pairs(mut bytes: ByteTensors, out: &mut BTreeMap<String, WeightTensor>, dir: &Path) -> Result<()> {
    let names: Vec<String> = bytes.keys().filter(|k| k.ends_with("_blocks")).cloned().collect();
    for blocks_name in names {
        let name = blocks_name.trim_end_matches("_blocks").to_string();
        let Some((scale_shape, scales)) = bytes.remove(&format!("{name}_scales")) else { continue };
        let (block_shape, blocks) = bytes.remove(&blocks_name).expect("listed above");
        let t = mxfp4_from_blocks(&name, &block_shape, blocks_of(&blocks), &scale_shape, blocks_of(&scales))
            .map_err(|e| Error::new(e.status, format!("{}: {}", dir.display(), e.message)))?;
        if out.insert(name.clone(), t).is_some() {
            return Err(Error::format(format!("{}: tensor {name} is stored both whole and as MXFP4 blocks", dir.display())));
        }
    }
    match bytes.keys().next() {
        Some(k) => Err(Error::unsupported(format!(
            "{}: tensor {k} has dtype U8 and is not half of an MXFP4 pair (<name>_blocks, <name>_scales)",
            dir.display()
        ))),
        None => Ok(()),
    }
}

fn blocks_of(b: &TensorBytes) -> &[u8] {
    match b {
        TensorBytes::Mapped { map, offset, len } => &map[*offset..offset + len],
        TensorBytes::Owned(v) => v,
    }
}

/// transformers' MXFP4 pair -> one MXFP4 tensor in GGUF's layout. HF (integrations/mxfp4.py,
/// `convert_moe_packed_tensors`): `blocks` (..., G, 16) holds 32 E2M1 codes per group, element
/// 2j the low nibble of byte j and 2j + 1 the high one; `scales` (..., G) the E8M0 exponents.
/// GGUF (ggml-common.h `block_mxfp4`): the exponent byte, then 16 bytes whose low nibbles are
/// elements 0..16 and high nibbles elements 16..32 (llama.cpp's converter,
/// `transform_nibble_layout`, makes the same bytes). The values are unchanged.
pub(crate) fn mxfp4_from_blocks(name: &str, block_shape: &[usize], blocks: &[u8], scale_shape: &[usize], scales: &[u8]) -> Result<WeightTensor> {
    let bad = || Error::tensor(format!("tensor {name}: MXFP4 blocks {block_shape:?} and scales {scale_shape:?} do not pair"));
    let (&16, lead) = block_shape.split_last().ok_or_else(bad)? else { return Err(bad()) };
    if lead != scale_shape || lead.is_empty() {
        return Err(bad());
    }
    let groups: usize = lead.iter().try_fold(1usize, |a, &d| a.checked_mul(d)).ok_or_else(bad)?;
    if blocks.len() != groups * 16 || scales.len() != groups {
        return Err(bad());
    }
    let code = |b: &[u8], i: usize| if i.is_multiple_of(2) { b[i / 2] & 0x0F } else { b[i / 2] >> 4 };
    let mut out = Vec::with_capacity(groups * 17);
    for (b, &e) in blocks.chunks_exact(16).zip(scales) {
        out.push(e);
        out.extend((0..16).map(|j| code(b, j) | code(b, j + 16) << 4));
    }
    let mut shape = lead.to_vec();
    let cols = shape.pop().expect("not empty") * 32;
    shape.push(cols);
    WeightTensor::new(name.to_string(), WeightType::MXFP4, shape, TensorBytes::Owned(Arc::new(out)))
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

/// Loads every tensor of one safetensors file (F32, F16 or BF16) into `out`.
pub(crate) fn load_file(path: &Path, out: &mut BTreeMap<String, WeightTensor>) -> Result<()> {
    load_into(path, out, None)
}

/// `load_file`, with u8 tensors put in `bytes` where given (refused otherwise).
fn load_into(path: &Path, out: &mut BTreeMap<String, WeightTensor>, mut bytes: Option<&mut ByteTensors>) -> Result<()> {
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
        let (b, e) = info.data_offsets;
        let offset = data_start
            .checked_add(b)
            .filter(|_| e >= b && data_start.checked_add(e).is_some_and(|end| end <= map.len()))
            .ok_or_else(|| {
                Error::format(format!("{}: tensor {name} lies outside the file", path.display()))
            })?;
        let data = TensorBytes::Mapped { map: map.clone(), offset, len: e - b };
        let shape = if info.shape.is_empty() { vec![1] } else { info.shape.clone() };
        let ty = match (info.dtype, bytes.as_deref_mut()) {
            (Dtype::F32, _) => WeightType::F32,
            (Dtype::F16, _) => WeightType::F16,
            (Dtype::BF16, _) => WeightType::BF16,
            // One byte per element (the safetensors crate checked the count against the shape).
            (Dtype::U8, Some(bytes)) => {
                if out.contains_key(&name) || bytes.insert(name.clone(), (shape, data)).is_some() {
                    return Err(Error::format(format!("{}: tensor {name} appears twice", path.display())));
                }
                continue;
            }
            (other, _) => {
                return Err(Error::unsupported(format!(
                    "{}: tensor {name} has dtype {other:?}; supported: F32, F16, BF16 (and U8 as MXFP4 pairs in a model folder)",
                    path.display()
                )))
            }
        };
        if bytes.as_deref().is_some_and(|b| b.contains_key(&name)) {
            return Err(Error::format(format!("{}: tensor {name} appears twice", path.display())));
        }
        let bytes_of_tensor = data;
        let t = WeightTensor::new(name.clone(), ty, shape, bytes_of_tensor)
            .map_err(|e| Error::new(e.status, format!("{}: {}", path.display(), e.message)))?;
        if out.insert(name.clone(), t).is_some() {
            return Err(Error::format(format!("{}: tensor {name} appears twice", path.display())));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// transformers' FP4 table (integrations/mxfp4.py `FP4_VALUES`) and its dequantization,
    /// `lut[code] * 2^(scale - 127)`, element 2j the low nibble of byte j: the tensor made from
    /// a pair dequantizes to those values, for two groups with different scales.
    #[test]
    fn an_mxfp4_pair_keeps_transformers_values() {
        const FP4: [f32; 16] = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0];
        // Group 0: codes 0..16 twice; group 1: codes 15..0 twice.
        let codes: Vec<u8> = (0..32).map(|i| (i % 16) as u8).chain((0..32).map(|i| 15 - (i % 16) as u8)).collect();
        let blocks: Vec<u8> = codes.chunks_exact(2).map(|p| p[0] | p[1] << 4).collect();
        let scales = [128u8, 125];
        let t = mxfp4_from_blocks("w", &[1, 2, 16], &blocks, &[1, 2], &scales).unwrap();
        assert_eq!((t.ty, t.shape.clone()), (WeightType::MXFP4, vec![1, 64]));
        let want: Vec<f32> = codes.iter().enumerate().map(|(i, &c)| FP4[c as usize] * 2f32.powi(scales[i / 32] as i32 - 127)).collect();
        let got = t.to_f32();
        assert!(got.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits() || (*a == 0.0 && *b == 0.0)), "{got:?}\n{want:?}");
        // Shapes that do not pair are refused by name.
        let Err(e) = mxfp4_from_blocks("w", &[2, 16], &blocks, &[1, 2], &scales) else { panic!("unpaired shapes were read") };
        assert!(e.message.contains("tensor w"), "{e}");
    }
}
