//! GGUF v2/v3 reader over a memory map.
//!
//! Layout (ggml's docs/gguf.md, "File Structure"; llama.cpp ggml/src/gguf.cpp `gguf_init_from_file_impl`):
//!
//! ```text
//! u32 magic "GGUF" | u32 version | u64 tensor_count | u64 metadata_kv_count
//! metadata_kv_count x { string key; u32 value_type; value }
//! tensor_count x { string name; u32 n_dims; u64 dims[n_dims]; u32 ggml_type; u64 offset }
//! padding to general.alignment (default 32)
//! tensor data; each tensor at data_start + offset, offset a multiple of the alignment
//! ```
//!
//! Strings are `u64 length` + UTF-8 bytes (no NUL); everything is little-endian. v1 used u32
//! counts and lengths and is refused. The reader trusts nothing in the file: every count, length,
//! shape and offset is checked against the bytes actually present, with checked arithmetic, before
//! anything is allocated for it, so a truncated or hostile header gives `ErrFormat` and never a
//! panic or a huge allocation.
//!
//! Arrays of strings and numbers are kept packed ([`PackedArray`]): numbers as their bytes in
//! the map, strings in one buffer. A vocabulary is hundreds of thousands of strings, which as
//! one `GgufValue` each would cost an allocation and some 60 bytes apiece at every open, to be
//! read once and dropped.

use crate::error::{Error, Result, Status};
use crate::quant::WeightType;
use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use super::gguf_value::{scalar, scalar_size, PackedData};
pub use super::gguf_value::{GgufValue, PackedArray};

/// "GGUF" read as a little-endian u32 (gguf.md: `GGUF_MAGIC 0x46554747`).
const GGUF_MAGIC: [u8; 4] = *b"GGUF";
/// gguf.md: `general.alignment` defaults to 32 when absent (`GGUF_DEFAULT_ALIGNMENT`).
pub const GGUF_DEFAULT_ALIGNMENT: u64 = 32;
/// ggml.h `GGML_MAX_DIMS`: a tensor has at most four dimensions.
const MAX_DIMS: u32 = 4;
/// Nested arrays are legal in the spec but no writer nests deeply; bound the recursion so a
/// hostile file cannot overflow the stack.
const MAX_ARRAY_DEPTH: usize = 8;
/// Upper bound on metadata values (array elements included) held in memory. The largest real
/// vocabularies (Gemma3: 262k tokens, plus scores, types and merges) stay near 1M; a hostile file
/// of N bytes could otherwise make ~32N bytes of `GgufValue`s.
const MAX_METADATA_VALUES: usize = 1 << 23;

/// One tensor of the file, with its shape and where its bytes are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GgufTensorInfo {
    pub name: String,
    /// ggml order: dims[0] is the fastest-varying (columns); a PyTorch [rows, cols] weight is
    /// stored as dims = [cols, rows].
    pub dims: Vec<u64>,
    pub ty: WeightType,
    /// Absolute byte offset of the first byte in the file (data section start + the tensor's
    /// relative offset).
    pub offset: usize,
    /// Bytes of the tensor: row_bytes(dims[0]) x dims[1] x dims[2] x dims[3].
    pub n_bytes: usize,
    /// The file of a split model the bytes are in (`GgufFile::part_maps`): 0 for the file opened.
    pub part: usize,
}

impl GgufTensorInfo {
    /// Number of elements (the product of the dims; checked at open not to overflow).
    pub fn n_elems(&self) -> usize {
        self.dims.iter().fold(1usize, |n, &d| n.saturating_mul(d as usize))
    }
}

/// An opened GGUF file: parsed header, tensor table, and the mapped bytes.
pub struct GgufFile {
    pub path: PathBuf,
    pub version: u32,
    pub metadata: BTreeMap<String, GgufValue>,
    pub tensors: Vec<GgufTensorInfo>,
    pub map: Arc<memmap2::Mmap>,
    /// Every file's map, `map` first: a split model's other files follow (`open`).
    pub part_maps: Vec<Arc<memmap2::Mmap>>,
}

impl fmt::Debug for GgufFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GgufFile")
            .field("path", &self.path)
            .field("version", &self.version)
            .field("n_metadata", &self.metadata.len())
            .field("n_tensors", &self.tensors.len())
            .field("len", &self.map.len())
            .finish()
    }
}

impl GgufFile {
    /// Map and parse a GGUF file. Checks the magic and version (2 or 3), every metadata value,
    /// every tensor's type (ErrUnsupported for a ggml type we do not implement), shape, alignment
    /// and that its bytes lie inside the file.
    ///
    /// A split model (llama.cpp's gguf-split: `split.count` > 1) is opened from its first file,
    /// `PREFIX-00001-of-0000N.gguf`: the others are found beside it by llama.cpp's naming
    /// (`PREFIX-0000K-of-0000N.gguf`), each checked to be split K-1 of N, and their tensors join
    /// the first file's (its metadata is the model's). Opening a later split is refused, naming
    /// the first.
    pub fn open(path: &Path) -> Result<GgufFile> {
        let mut g = GgufFile::open_one(path)?;
        let Some(count) = g.split_count()? else { return Ok(g) };
        let no = g.split_no()?;
        if no != 0 {
            let first = split_prefix(path, no, count).map(|p| split_path(&p, 0, count).display().to_string());
            return Err(Error::format(format!(
                "{}: this is split {} of {count} of a model; open its first split{}",
                path.display(),
                no + 1,
                first.map(|f| format!(", {f}")).unwrap_or_default()
            )));
        }
        let prefix = split_prefix(path, 0, count).ok_or_else(|| {
            Error::format(format!("{}: split 1 of {count} of a model, but not named PREFIX-00001-of-{count:05}.gguf, so its other splits cannot be found", path.display()))
        })?;
        let rest: Vec<PathBuf> = (1..count).map(|k| split_path(&prefix, k, count)).collect();
        g.join_splits(count, &rest)?;
        Ok(g)
    }

    /// `open` of a split model from its files listed in order (llama.cpp's
    /// `llama_model_load_from_splits`): any names, each checked to be split K of N.
    pub fn open_splits(paths: &[PathBuf]) -> Result<GgufFile> {
        let first = paths.first().ok_or_else(|| Error::new(Status::ErrInvalidArgument, "no split files given"))?;
        let mut g = GgufFile::open_one(first)?;
        let count = g.split_count()?.unwrap_or(1);
        if g.split_no()? != 0 {
            return Err(Error::format(format!("{}: this is not the first split of its model (split.no = {})", first.display(), g.split_no()?)));
        }
        if paths.len() != count as usize {
            return Err(Error::new(Status::ErrInvalidArgument, format!("{} split files given, {} says the model has {count}", paths.len(), first.display())));
        }
        g.join_splits(count, &paths[1..])?;
        Ok(g)
    }

    /// One file alone.
    fn open_one(path: &Path) -> Result<GgufFile> {
        let file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
        let len = file.metadata().map_err(|e| Error::io(path, e))?.len();
        if len == 0 {
            // Mapping an empty file fails on some platforms; it is not a GGUF either way.
            return Err(Error::format(format!("{}: empty file, not a GGUF", path.display())));
        }
        // SAFETY: the map is read-only. Like every mmap-based loader (llama.cpp, safetensors) we
        // rely on the file not being truncated or rewritten while it is open; that is the
        // documented contract of opening a model.
        let map = Arc::new(unsafe { memmap2::Mmap::map(&file) }.map_err(|e| Error::io(path, e))?);
        let header = parse(&map, path)?;
        Ok(GgufFile { path: path.to_path_buf(), version: header.version, metadata: header.metadata, tensors: header.tensors, part_maps: vec![map.clone()], map })
    }

    /// `split.count` where it says more than one file.
    fn split_count(&self) -> Result<Option<u16>> {
        match self.get_u64("split.count")? {
            None | Some(0 | 1) => Ok(None),
            Some(n) => u16::try_from(n).map(Some).map_err(|_| Error::format(format!("{}: split.count is {n}, more than a u16", self.path.display()))),
        }
    }

    /// `split.no` (0 for the first file); missing in a split file is an error.
    fn split_no(&self) -> Result<u16> {
        let no = self.get_u64("split.no")?.ok_or_else(|| Error::format(format!("{}: split.count is set but split.no is missing", self.path.display())))?;
        match (u16::try_from(no), self.split_count()?) {
            (Ok(no), Some(count)) if no < count => Ok(no),
            _ => Err(Error::format(format!("{}: split.no is {no}, outside split.count", self.path.display()))),
        }
    }

    /// Adds the tensors of splits 2..=count (`rest`, in order) to this first split's.
    fn join_splits(&mut self, count: u16, rest: &[PathBuf]) -> Result<()> {
        let mut names: std::collections::HashSet<String> = self.tensors.iter().map(|t| t.name.clone()).collect();
        for (k, path) in rest.iter().enumerate() {
            let part = GgufFile::open_one(path).map_err(|e| Error::new(e.status, format!("split {} of {count} of {}: {}", k + 2, self.path.display(), e.message)))?;
            let (no, n) = (part.get_u64("split.no")?, part.get_u64("split.count")?);
            if no != Some(k as u64 + 1) || n != Some(count as u64) {
                return Err(Error::format(format!(
                    "{}: expected split {} of {count} (split.no {}), it says split.no {} of split.count {}",
                    path.display(),
                    k + 2,
                    k + 1,
                    no.map_or("missing".into(), |v| v.to_string()),
                    n.map_or("missing".into(), |v| v.to_string())
                )));
            }
            let at = self.part_maps.len();
            for mut t in part.tensors {
                if !names.insert(t.name.clone()) {
                    return Err(Error::format(format!("{}: tensor '{}' is also in an earlier split", path.display(), t.name)));
                }
                t.part = at;
                self.tensors.push(t);
            }
            self.part_maps.push(part.map);
        }
        if let Some(want) = self.get_u64("split.tensors.count")? {
            if want != self.tensors.len() as u64 {
                return Err(Error::format(format!("{}: split.tensors.count is {want}, the {count} splits hold {} tensors", self.path.display(), self.tensors.len())));
            }
        }
        Ok(())
    }

    /// The bytes of a tensor of this file (validated at open). A `GgufTensorInfo` that did not
    /// come from this file and points outside it gets an empty slice rather than a panic.
    pub fn tensor_data(&self, t: &GgufTensorInfo) -> &[u8] {
        let range = t.offset..t.offset.saturating_add(t.n_bytes);
        let data = self.part_maps.get(t.part).and_then(|m| m.get(range)).unwrap_or(&[]);
        debug_assert_eq!(data.len(), t.n_bytes, "tensor {} is not from {}", t.name, self.path.display());
        data
    }

    /// The tensor named `name`, if any.
    pub fn tensor(&self, name: &str) -> Option<&GgufTensorInfo> {
        self.tensors.iter().find(|t| t.name == name)
    }

    pub fn get(&self, key: &str) -> Option<&GgufValue> {
        self.metadata.get(key)
    }

    fn wrong_type(&self, key: &str, want: &str, v: &GgufValue) -> Error {
        Error::format(format!(
            "{}: metadata key '{key}' is {} {v}, expected {want}",
            self.path.display(),
            v.type_name()
        ))
    }

    /// A string value; Err(ErrFormat) naming the key if present with another type.
    pub fn get_str(&self, key: &str) -> Result<Option<&str>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v.as_str().map(Some).ok_or_else(|| self.wrong_type(key, "a string", v)),
        }
    }

    /// Any integer type as u64; Err(ErrFormat) for another type or a negative value.
    pub fn get_u64(&self, key: &str) -> Result<Option<u64>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_integer()
                .and_then(|i| u64::try_from(i).ok())
                .map(Some)
                .ok_or_else(|| self.wrong_type(key, "a non-negative integer", v)),
        }
    }

    /// A float or integer value as f64; Err(ErrFormat) for another type.
    pub fn get_f64(&self, key: &str) -> Result<Option<f64>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v.as_f64().map(Some).ok_or_else(|| self.wrong_type(key, "a number", v)),
        }
    }

    pub fn get_bool(&self, key: &str) -> Result<Option<bool>> {
        match self.get(key) {
            None => Ok(None),
            Some(GgufValue::Bool(b)) => Ok(Some(*b)),
            Some(v) => Err(self.wrong_type(key, "a bool", v)),
        }
    }

    /// The strings of an array of strings, borrowed (no value is built for a packed array);
    /// Err(ErrFormat) naming the key when it is not an array, or the first element that is not
    /// a string.
    pub fn get_str_array(&self, key: &str) -> Result<Option<Vec<&str>>> {
        let Some(v) = self.get(key) else { return Ok(None) };
        if let GgufValue::Packed(p) = v {
            if p.elem_type == 8 {
                return Ok(Some(p.strings().collect()));
            }
        }
        self.elements(key, v, "a string", |e| e.as_str()).map(Some)
    }

    /// An array of integers (of any integer type) as i64 (a uint64 above i64::MAX wraps, as
    /// a C cast does); Err(ErrFormat) naming the key, or the first element that is not one.
    pub fn get_int_array(&self, key: &str) -> Result<Option<Vec<i64>>> {
        let Some(v) = self.get(key) else { return Ok(None) };
        if let GgufValue::Packed(p) = v {
            if let (Some(size), 0..=5 | 10 | 11) = (scalar_size(p.elem_type), p.elem_type) {
                let ints = p.scalar_bytes().chunks_exact(size).map(|b| scalar(p.elem_type, b).as_integer().unwrap_or(0) as i64);
                return Ok(Some(ints.collect()));
            }
        }
        self.elements(key, v, "an integer", |e| e.as_integer().map(|i| i as i64)).map(Some)
    }

    /// An array of float32; Err(ErrFormat) naming the key, or the first element of another
    /// type.
    pub fn get_f32_array(&self, key: &str) -> Result<Option<Vec<f32>>> {
        let Some(v) = self.get(key) else { return Ok(None) };
        if let GgufValue::Packed(p) = v {
            if p.elem_type == 6 {
                let floats = p.scalar_bytes().chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]));
                return Ok(Some(floats.collect()));
            }
        }
        self.elements(key, v, "float32", |e| match e {
            GgufValue::F32(x) => Some(*x),
            _ => None,
        })
        .map(Some)
    }

    /// Every element of array value `v` (metadata key `key`) through `get`; Err names the key
    /// when `v` is not an array, else the first element `get` refuses (as not `want`).
    fn elements<'v, T>(&self, key: &str, v: &'v GgufValue, want: &str, get: impl Fn(&'v GgufValue) -> Option<T>) -> Result<Vec<T>> {
        let a = v.as_array().ok_or_else(|| self.wrong_type(key, "an array", v))?;
        a.iter()
            .enumerate()
            .map(|(i, e)| {
                get(e).ok_or_else(|| {
                    Error::format(format!("{}: {key}[{i}] is {} {e}, expected {want}", self.path.display(), e.type_name()))
                })
            })
            .collect()
    }

    /// An array value; Err(ErrFormat) naming the key if present with another type. A packed
    /// array's values are built on the first call (see [`GgufFile::get_str_array`] and the
    /// other typed getters, which build none).
    pub fn get_array(&self, key: &str) -> Result<Option<&[GgufValue]>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v.as_array().map(Some).ok_or_else(|| self.wrong_type(key, "an array", v)),
        }
    }

    /// `general.architecture` (gguf.md: required), e.g. "llama", "gemma3".
    pub fn architecture(&self) -> Result<&str> {
        self.get_str("general.architecture")?.ok_or_else(|| {
            Error::format(format!("{}: metadata key 'general.architecture' is missing", self.path.display()))
        })
    }
}

/// llama.cpp's name of split `k` (from 0) of `count`: `PREFIX-0000{k+1}-of-0000{count}.gguf`
/// (`llama_split_path`).
pub fn split_path(prefix: &Path, k: u16, count: u16) -> PathBuf {
    let mut s = prefix.as_os_str().to_os_string();
    s.push(format!("-{:05}-of-{:05}.gguf", k + 1, count));
    PathBuf::from(s)
}

/// The prefix of `path` when it is named as split `k` (from 0) of `count`
/// (`llama_split_prefix`), else None.
pub fn split_prefix(path: &Path, k: u16, count: u16) -> Option<PathBuf> {
    let tail = format!("-{:05}-of-{:05}.gguf", k + 1, count);
    let s = path.to_str()?;
    s.strip_suffix(&tail).filter(|p| !p.is_empty()).map(PathBuf::from)
}

/// What `parse` reads out of the header.
struct Header {
    version: u32,
    metadata: BTreeMap<String, GgufValue>,
    tensors: Vec<GgufTensorInfo>,
}

/// Parse the header and tensor table of the GGUF file mapped at `map`.
fn parse(map: &Arc<memmap2::Mmap>, path: &Path) -> Result<Header> {
    let mut r = Reader { buf: map, map, pos: 0, path, n_values: 0 };

    let magic = r.take(4, &"the magic")?;
    if magic != GGUF_MAGIC {
        return Err(r.format(format!("not a GGUF file (magic {magic:02x?}, expected \"GGUF\")")));
    }
    let version = r.u32(&"the version")?;
    match version {
        2 | 3 => {}
        // v1 (2023) used u32 counts and string lengths; nothing current writes it.
        1 => return Err(r.unsupported("GGUF version 1 is not supported (re-convert the model)".into())),
        // ggml's gguf.cpp reads a byte-swapped version as a sign of a big-endian file.
        v if v.swap_bytes() <= 3 => {
            return Err(r.unsupported(format!("big-endian GGUF (version {v:#x}) is not supported")))
        }
        v => return Err(r.unsupported(format!("GGUF version {v} is not supported (2 and 3 are)"))),
    }
    let n_tensors = r.u64(&"the tensor count")?;
    let n_kv = r.u64(&"the metadata count")?;

    // Each metadata entry takes at least 13 bytes (key length 8 + type 4 + 1-byte value), each
    // tensor info at least 24 (name length 8 + n_dims 4 + type 4 + offset 8): a count that
    // cannot fit in the rest of the file is refused before any allocation sized by it.
    r.check_count(n_kv, 13, "metadata entries")?;
    let mut metadata = BTreeMap::new();
    for i in 0..n_kv {
        let key = r.string(&format_args!("the key of metadata entry {i}"))?;
        let value = r.value(&key, 0)?;
        if metadata.insert(key.clone(), value).is_some() {
            return Err(r.format(format!("metadata key '{key}' appears twice")));
        }
    }

    // gguf.md: general.alignment is a uint32; llama.cpp refuses 0 and non-powers of two.
    let alignment = match metadata.get("general.alignment") {
        None => GGUF_DEFAULT_ALIGNMENT,
        Some(v) => match v.as_integer() {
            Some(a) if a > 0 && a <= 1 << 30 && (a & (a - 1)) == 0 => a as u64,
            _ => return Err(r.format(format!("general.alignment is {} {v}, expected a power of two", v.type_name()))),
        },
    };

    let n_tensors_usize = r.check_count(n_tensors, 24, "tensor infos")?;
    let mut infos = Vec::with_capacity(n_tensors_usize);
    let mut names = std::collections::HashSet::with_capacity(n_tensors_usize);
    for i in 0..n_tensors {
        let info = r.tensor_info(i)?;
        if !names.insert(info.0.clone()) {
            return Err(r.format(format!("tensor '{}' appears twice", info.0)));
        }
        infos.push(info);
    }

    // The data section starts at the next multiple of the alignment after the tensor table.
    let data_start = (r.pos as u64)
        .checked_next_multiple_of(alignment)
        .ok_or_else(|| r.format("data section offset overflows".into()))?;
    let file_len = map.len() as u64;
    let mut tensors = Vec::with_capacity(infos.len());
    for (name, dims, ty, rel_offset, n_bytes) in infos {
        if !rel_offset.is_multiple_of(alignment) {
            return Err(r.format(format!(
                "tensor '{name}': offset {rel_offset} is not a multiple of the alignment {alignment}"
            )));
        }
        let start = data_start.checked_add(rel_offset);
        let end = start.and_then(|s| s.checked_add(n_bytes as u64));
        let (Some(start), Some(end)) = (start, end) else {
            return Err(r.format(format!("tensor '{name}': offset {rel_offset} overflows")));
        };
        if end > file_len {
            return Err(r.format(format!(
                "tensor '{name}' ({} {dims:?}, {n_bytes} bytes at byte {start}) ends at byte {end}, past the end of the file ({file_len} bytes): truncated",
                ty.name()
            )));
        }
        // end <= file_len, and the file is mapped, so both fit in usize.
        tensors.push(GgufTensorInfo { name, dims, ty, offset: start as usize, n_bytes, part: 0 });
    }
    Ok(Header { version, metadata, tensors })
}

/// A cursor over the file bytes. Every read is bounds-checked and names what it was reading.
struct Reader<'a> {
    buf: &'a [u8],
    /// The map `buf` is, for the arrays of numbers left in it.
    map: &'a Arc<memmap2::Mmap>,
    pos: usize,
    path: &'a Path,
    /// Metadata values held so far (array elements included), against MAX_METADATA_VALUES.
    n_values: usize,
}

type TensorEntry = (String, Vec<u64>, WeightType, u64, usize);

impl<'a> Reader<'a> {
    fn format(&self, msg: String) -> Error {
        Error::format(format!("{}: {msg}", self.path.display()))
    }

    fn unsupported(&self, msg: String) -> Error {
        Error::unsupported(format!("{}: {msg}", self.path.display()))
    }

    fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// The next `n` bytes, or ErrFormat naming `what` if the file ends first.
    fn take(&mut self, n: usize, what: &dyn fmt::Display) -> Result<&'a [u8]> {
        if n > self.remaining() {
            return Err(self.format(format!(
                "truncated: {what} needs {n} bytes at byte {}, the file has {} bytes",
                self.pos,
                self.buf.len()
            )));
        }
        let bytes = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(bytes)
    }

    fn array<const N: usize>(&mut self, what: &dyn fmt::Display) -> Result<[u8; N]> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N, what)?);
        Ok(a)
    }

    fn u32(&mut self, what: &dyn fmt::Display) -> Result<u32> {
        self.array(what).map(u32::from_le_bytes)
    }

    fn u64(&mut self, what: &dyn fmt::Display) -> Result<u64> {
        self.array(what).map(u64::from_le_bytes)
    }

    /// A count of items each at least `min_bytes` long must fit in the rest of the file.
    fn check_count(&self, n: u64, min_bytes: usize, what: &str) -> Result<usize> {
        match usize::try_from(n) {
            Ok(n) if n <= self.remaining() / min_bytes => Ok(n),
            _ => Err(self.format(format!(
                "{n} {what} cannot fit in the {} bytes left at byte {}",
                self.remaining(),
                self.pos
            ))),
        }
    }

    /// A gguf string: u64 length + UTF-8 bytes.
    fn string(&mut self, what: &dyn fmt::Display) -> Result<String> {
        let len = self.u64(&format_args!("the length of {what}"))?;
        let len = usize::try_from(len).unwrap_or(usize::MAX);
        let bytes = self.take(len, what)?;
        String::from_utf8(bytes.to_vec()).map_err(|e| {
            self.format(format!("{what} is not valid UTF-8 (bad byte at {})", e.utf8_error().valid_up_to()))
        })
    }

    fn count_value(&mut self, key: &str) -> Result<()> {
        self.count_values(key, 1)
    }

    /// Counts `n` more values (the elements of a packed array count too: its values may be
    /// built later).
    fn count_values(&mut self, key: &str, n: usize) -> Result<()> {
        self.n_values = self.n_values.saturating_add(n);
        if self.n_values > MAX_METADATA_VALUES {
            return Err(self.format(format!(
                "metadata key '{key}': more than {MAX_METADATA_VALUES} metadata values in the file"
            )));
        }
        Ok(())
    }

    /// The type tag and value of metadata key `key`.
    fn value(&mut self, key: &str, depth: usize) -> Result<GgufValue> {
        let ty = self.u32(&format_args!("the type of metadata key '{key}'"))?;
        self.typed_value(key, ty, depth)
    }

    fn typed_value(&mut self, key: &str, ty: u32, depth: usize) -> Result<GgufValue> {
        self.count_value(key)?;
        let what = format_args!("the value of metadata key '{key}'");
        Ok(match ty {
            0 => GgufValue::U8(self.array::<1>(&what)?[0]),
            1 => GgufValue::I8(i8::from_le_bytes(self.array(&what)?)),
            2 => GgufValue::U16(u16::from_le_bytes(self.array(&what)?)),
            3 => GgufValue::I16(i16::from_le_bytes(self.array(&what)?)),
            4 => GgufValue::U32(u32::from_le_bytes(self.array(&what)?)),
            5 => GgufValue::I32(i32::from_le_bytes(self.array(&what)?)),
            6 => GgufValue::F32(f32::from_le_bytes(self.array(&what)?)),
            7 => match self.array::<1>(&what)?[0] {
                // gguf.md: a bool is one byte, 0 or 1.
                b @ (0 | 1) => GgufValue::Bool(b == 1),
                b => return Err(self.format(format!("metadata key '{key}': bool byte is {b}, expected 0 or 1"))),
            },
            8 => GgufValue::Str(self.string(&what)?),
            9 => self.array_value(key, depth)?,
            10 => GgufValue::U64(u64::from_le_bytes(self.array(&what)?)),
            11 => GgufValue::I64(i64::from_le_bytes(self.array(&what)?)),
            12 => GgufValue::F64(f64::from_le_bytes(self.array(&what)?)),
            t => return Err(self.format(format!("metadata key '{key}' has unknown value type {t}"))),
        })
    }

    /// gguf.md array: u32 element type, u64 count, then the elements.
    fn array_value(&mut self, key: &str, depth: usize) -> Result<GgufValue> {
        if depth >= MAX_ARRAY_DEPTH {
            return Err(self.format(format!("metadata key '{key}': arrays nested deeper than {MAX_ARRAY_DEPTH}")));
        }
        let elem_ty = self.u32(&format_args!("the element type of array '{key}'"))?;
        let n = self.u64(&format_args!("the length of array '{key}'"))?;
        // Smallest encoding of one element: its fixed size, a string's u64 length, or a nested
        // array's type + length.
        let min_elem = match elem_ty {
            0 | 1 | 7 => 1,
            2 | 3 => 2,
            4..=6 => 4,
            8 | 10 | 11 | 12 => 8,
            9 => 12,
            t => return Err(self.format(format!("array '{key}' has unknown element type {t}"))),
        };
        let n = self.check_count(n, min_elem, &format!("elements of array '{key}'"))?;
        if elem_ty != 9 {
            return self.packed_array(key, elem_ty, n);
        }
        let mut items = Vec::with_capacity(n.min(MAX_METADATA_VALUES.saturating_sub(self.n_values)));
        for _ in 0..n {
            items.push(self.typed_value(key, elem_ty, depth + 1)?);
        }
        Ok(GgufValue::Array(items))
    }

    /// The `n` elements of type `elem_ty` (not array) of array `key`, checked as
    /// `typed_value` checks each (bounds, bools 0 or 1, strings UTF-8) and packed.
    fn packed_array(&mut self, key: &str, elem_ty: u32, n: usize) -> Result<GgufValue> {
        self.count_values(key, n)?;
        let what = format_args!("the value of metadata key '{key}'");
        let data = match scalar_size(elem_ty) {
            Some(size) => {
                let start = self.pos;
                // check_count bounded n by the bytes left, so this does not overflow.
                let bytes = self.take(n.saturating_mul(size), &what)?;
                if let Some(b) = bytes.iter().find(|&&b| elem_ty == 7 && b > 1) {
                    return Err(self.format(format!("metadata key '{key}': bool byte is {b}, expected 0 or 1")));
                }
                PackedData::Scalars { map: self.map.clone(), start, end: self.pos }
            }
            None => {
                // One pass gathers the strings, one validation checks them all: the buffer is
                // UTF-8 and each end a character boundary exactly when every string is UTF-8.
                let mut bytes = Vec::new();
                let mut ends = Vec::with_capacity(n);
                for _ in 0..n {
                    let len = self.u64(&format_args!("the length of {what}"))?;
                    let len = usize::try_from(len).unwrap_or(usize::MAX);
                    bytes.extend_from_slice(self.take(len, &what)?);
                    ends.push(bytes.len());
                }
                let text = match String::from_utf8(bytes) {
                    Ok(text) => text,
                    Err(e) => {
                        let at = e.utf8_error().valid_up_to();
                        let i = ends.partition_point(|&end| end <= at);
                        return Err(self.format(format!("metadata key '{key}': element {i} is not valid UTF-8")));
                    }
                };
                if let Some(i) = ends.iter().position(|&end| !text.is_char_boundary(end)) {
                    return Err(self.format(format!("metadata key '{key}': element {i} is not valid UTF-8 (it ends inside a character)")));
                }
                PackedData::Strings { text, ends }
            }
        };
        Ok(GgufValue::Packed(PackedArray { elem_type: elem_ty, len: n, data, values: OnceLock::new() }))
    }

    /// One tensor info: name, dims, ggml type, relative offset; the byte size is computed and
    /// checked here.
    fn tensor_info(&mut self, i: u64) -> Result<TensorEntry> {
        let name = self.string(&format_args!("the name of tensor {i}"))?;
        let n_dims = self.u32(&format_args!("the dimension count of tensor '{name}'"))?;
        if n_dims > MAX_DIMS {
            return Err(self.format(format!("tensor '{name}' has {n_dims} dimensions, at most {MAX_DIMS} allowed")));
        }
        let mut dims = Vec::with_capacity(n_dims as usize);
        for d in 0..n_dims {
            dims.push(self.u64(&format_args!("dimension {d} of tensor '{name}'"))?);
        }
        let type_id = self.u32(&format_args!("the type of tensor '{name}'"))?;
        let rel_offset = self.u64(&format_args!("the data offset of tensor '{name}'"))?;
        let ty = WeightType::from_ggml_type(type_id).ok_or_else(|| {
            self.unsupported(format!("tensor '{name}' has ggml type {type_id}, which packlm does not implement"))
        })?;
        let n_bytes = tensor_bytes(&dims, ty).map_err(|why| {
            self.format(format!("tensor '{name}' ({} {dims:?}): {why}", ty.name()))
        })?;
        Ok((name, dims, ty, rel_offset, n_bytes))
    }
}

/// Bytes of a tensor of shape `dims` (ggml order) and type `ty`: whole blocks per row
/// (ggml.c `ggml_row_size`), times the other dims, all checked.
fn tensor_bytes(dims: &[u64], ty: WeightType) -> std::result::Result<usize, String> {
    let too_big = || "size overflows".to_string();
    let mut n_elems: usize = 1;
    for &d in dims {
        // gguf.cpp refuses dims above INT64_MAX (ggml's ne is int64_t).
        if d > i64::MAX as u64 {
            return Err(format!("dimension {d} is out of range"));
        }
        n_elems = usize::try_from(d).ok().and_then(|d| n_elems.checked_mul(d)).ok_or_else(too_big)?;
    }
    let cols = dims.first().map_or(Ok(1), |&c| usize::try_from(c).map_err(|_| too_big()))?;
    let row = ty.row_bytes(cols).ok_or_else(|| {
        format!("a row of {cols} elements is not a whole number of {}-element blocks", ty.block_elems())
    })?;
    let rows = n_elems.checked_div(cols).unwrap_or(0);
    row.checked_mul(rows).ok_or_else(too_big)
}
