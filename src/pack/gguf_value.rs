//! GGUF metadata values (gguf.md `gguf_metadata_value_type`), as gguf.rs's reader makes them:
//! scalars, strings, and arrays, which a file's reader keeps packed ([`PackedArray`]).

use std::fmt;
use std::sync::{Arc, OnceLock};

/// A metadata value (gguf.md `gguf_metadata_value_type`: 0 u8, 1 i8, 2 u16, 3 i16, 4 u32, 5 i32,
/// 6 f32, 7 bool, 8 string, 9 array, 10 u64, 11 i64, 12 f64). An array is `Array` or `Packed`
/// (as a file is read, see [`PackedArray`]); the two compare equal when their elements do.
#[derive(Clone, Debug)]
pub enum GgufValue {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    U64(u64),
    I64(i64),
    F32(f32),
    F64(f64),
    Bool(bool),
    Str(String),
    Array(Vec<GgufValue>),
    /// An array of strings or numbers read from a file: what `GgufFile::open` makes of every
    /// array whose elements are not arrays.
    Packed(PackedArray),
}

impl PartialEq for GgufValue {
    fn eq(&self, other: &GgufValue) -> bool {
        use GgufValue as V;
        match (self, other) {
            (V::U8(a), V::U8(b)) => a == b,
            (V::I8(a), V::I8(b)) => a == b,
            (V::U16(a), V::U16(b)) => a == b,
            (V::I16(a), V::I16(b)) => a == b,
            (V::U32(a), V::U32(b)) => a == b,
            (V::I32(a), V::I32(b)) => a == b,
            (V::U64(a), V::U64(b)) => a == b,
            (V::I64(a), V::I64(b)) => a == b,
            (V::F32(a), V::F32(b)) => a == b,
            (V::F64(a), V::F64(b)) => a == b,
            (V::Bool(a), V::Bool(b)) => a == b,
            (V::Str(a), V::Str(b)) => a == b,
            (V::Array(_) | V::Packed(_), V::Array(_) | V::Packed(_)) => self.as_array() == other.as_array(),
            _ => false,
        }
    }
}

/// An array of strings or numbers, checked at open (bounds, bools 0 or 1, UTF-8) and kept
/// packed: numbers as their bytes in the map, strings one after another in one buffer.
/// [`GgufFile::get_str_array`] and friends borrow or convert the elements without making values
/// of them; [`PackedArray::values`] (which `as_array` and `get_array` return) builds them on
/// first use and keeps them.
#[derive(Clone)]
pub struct PackedArray {
    /// gguf.md element type (0..=8, 10..=12).
    pub(super) elem_type: u32,
    pub(super) len: usize,
    pub(super) data: PackedData,
    pub(super) values: OnceLock<Vec<GgufValue>>,
}

#[derive(Clone)]
pub(super) enum PackedData {
    /// Fixed-size elements: bytes start..end of the map.
    Scalars { map: Arc<memmap2::Mmap>, start: usize, end: usize },
    /// Strings: element i is text[ends[i - 1]..ends[i]] (from 0 for the first); `text` was
    /// validated as a whole and every end is a character boundary, so each element is valid
    /// UTF-8 exactly when it was in the file.
    Strings { text: String, ends: Vec<usize> },
}

impl fmt::Debug for PackedArray {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PackedArray").field("elem_type", &type_name(self.elem_type)).field("len", &self.len).finish()
    }
}

impl PackedArray {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The GGUF spelling of the element type, for messages.
    pub fn elem_type_name(&self) -> &'static str {
        type_name(self.elem_type)
    }

    /// The bytes of fixed-size elements (empty for strings).
    pub(super) fn scalar_bytes(&self) -> &[u8] {
        match &self.data {
            PackedData::Scalars { map, start, end } => map.get(*start..*end).unwrap_or(&[]),
            PackedData::Strings { .. } => &[],
        }
    }

    /// The string elements (none for numbers).
    pub(super) fn strings(&self) -> impl Iterator<Item = &str> + '_ {
        let (text, ends): (&str, &[usize]) = match &self.data {
            PackedData::Strings { text, ends } => (text, ends),
            PackedData::Scalars { .. } => ("", &[]),
        };
        let mut start = 0;
        ends.iter().map(move |&end| {
            // Boundaries were checked when the buffer was built.
            let s = text.get(start..end).unwrap_or("");
            start = end;
            s
        })
    }

    /// The elements as values, built on the first call.
    pub fn values(&self) -> &[GgufValue] {
        self.values.get_or_init(|| match self.elem_type {
            8 => self.strings().map(|s| GgufValue::Str(s.to_string())).collect(),
            ty => {
                let size = scalar_size(ty).unwrap_or(1);
                self.scalar_bytes().chunks_exact(size).map(|b| scalar(ty, b)).collect()
            }
        })
    }
}

/// gguf.md: the byte size of a fixed-size element type, None for string and array.
pub(super) fn scalar_size(ty: u32) -> Option<usize> {
    match ty {
        0 | 1 | 7 => Some(1),
        2 | 3 => Some(2),
        4..=6 => Some(4),
        10..=12 => Some(8),
        _ => None,
    }
}

/// The value of a fixed-size element of type `ty` from its `bytes` (exactly its size; a bool
/// byte was checked at open to be 0 or 1).
pub(super) fn scalar(ty: u32, b: &[u8]) -> GgufValue {
    let mut w = [0u8; 8];
    let n = b.len().min(8);
    w[..n].copy_from_slice(&b[..n]);
    let [b0, b1, b2, b3, ..] = w;
    match ty {
        0 => GgufValue::U8(b0),
        1 => GgufValue::I8(b0 as i8),
        2 => GgufValue::U16(u16::from_le_bytes([b0, b1])),
        3 => GgufValue::I16(i16::from_le_bytes([b0, b1])),
        4 => GgufValue::U32(u32::from_le_bytes([b0, b1, b2, b3])),
        5 => GgufValue::I32(i32::from_le_bytes([b0, b1, b2, b3])),
        6 => GgufValue::F32(f32::from_le_bytes([b0, b1, b2, b3])),
        7 => GgufValue::Bool(b0 == 1),
        10 => GgufValue::U64(u64::from_le_bytes(w)),
        11 => GgufValue::I64(i64::from_le_bytes(w)),
        _ => GgufValue::F64(f64::from_le_bytes(w)),
    }
}

/// The GGUF spelling of value type `ty`, for messages.
fn type_name(ty: u32) -> &'static str {
    match ty {
        0 => "uint8",
        1 => "int8",
        2 => "uint16",
        3 => "int16",
        4 => "uint32",
        5 => "int32",
        6 => "float32",
        7 => "bool",
        8 => "string",
        9 => "array",
        10 => "uint64",
        11 => "int64",
        _ => "float64",
    }
}

impl GgufValue {
    /// The GGUF spelling of this value's type, for messages.
    pub fn type_name(&self) -> &'static str {
        match self {
            GgufValue::U8(_) => "uint8",
            GgufValue::I8(_) => "int8",
            GgufValue::U16(_) => "uint16",
            GgufValue::I16(_) => "int16",
            GgufValue::U32(_) => "uint32",
            GgufValue::I32(_) => "int32",
            GgufValue::U64(_) => "uint64",
            GgufValue::I64(_) => "int64",
            GgufValue::F32(_) => "float32",
            GgufValue::F64(_) => "float64",
            GgufValue::Bool(_) => "bool",
            GgufValue::Str(_) => "string",
            GgufValue::Array(_) | GgufValue::Packed(_) => "array",
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            GgufValue::Str(s) => Some(s),
            _ => None,
        }
    }

    /// Any integer type as i128 (wide enough for every one of them), else None.
    pub fn as_integer(&self) -> Option<i128> {
        Some(match *self {
            GgufValue::U8(v) => v.into(),
            GgufValue::I8(v) => v.into(),
            GgufValue::U16(v) => v.into(),
            GgufValue::I16(v) => v.into(),
            GgufValue::U32(v) => v.into(),
            GgufValue::I32(v) => v.into(),
            GgufValue::U64(v) => v.into(),
            GgufValue::I64(v) => v.into(),
            _ => return None,
        })
    }

    /// Floats and integers as f64, else None.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            GgufValue::F32(v) => Some(v.into()),
            GgufValue::F64(v) => Some(v),
            _ => self.as_integer().map(|v| v as f64),
        }
    }

    /// The elements of an array (a packed one's are built on the first call).
    pub fn as_array(&self) -> Option<&[GgufValue]> {
        match self {
            GgufValue::Array(a) => Some(a),
            GgufValue::Packed(p) => Some(p.values()),
            _ => None,
        }
    }

    /// The number of elements of an array, without building a packed one's values.
    pub fn array_len(&self) -> Option<usize> {
        match self {
            GgufValue::Array(a) => Some(a.len()),
            GgufValue::Packed(p) => Some(p.len()),
            _ => None,
        }
    }
}

impl fmt::Display for GgufValue {
    /// Short form for messages: arrays show their length, long strings are cut.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GgufValue::Str(s) if s.chars().count() > 60 => {
                write!(f, "{:?}...", s.chars().take(60).collect::<String>())
            }
            GgufValue::Str(s) => write!(f, "{s:?}"),
            GgufValue::Array(a) => write!(f, "[{} elements]", a.len()),
            GgufValue::Packed(p) => write!(f, "[{} elements]", p.len()),
            GgufValue::F32(v) => write!(f, "{v}"),
            GgufValue::F64(v) => write!(f, "{v}"),
            GgufValue::Bool(v) => write!(f, "{v}"),
            other => write!(f, "{}", other.as_integer().unwrap_or_default()),
        }
    }
}
