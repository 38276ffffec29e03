//! GGUF reader: the real SmolLM2 file against values gguf-py reports, a synthetic file built
//! here byte by byte, truncation at every offset, and hostile headers (checked not to allocate).

mod common;

use common::smollm2;

use packlm::error::Status;
use packlm::pack::gguf::{GgufFile, GgufValue};
use packlm::quant::{dequantize_row, WeightType};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

// ---- allocation watch: the largest single allocation made by a thread that asked for it ----

struct Watch;
static LARGEST: AtomicUsize = AtomicUsize::new(0);
thread_local! { static WATCHING: Cell<bool> = const { Cell::new(false) }; }

unsafe impl GlobalAlloc for Watch {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if WATCHING.try_with(|w| w.get()).unwrap_or(false) {
            LARGEST.fetch_max(layout.size(), Ordering::Relaxed);
        }
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if WATCHING.try_with(|w| w.get()).unwrap_or(false) {
            LARGEST.fetch_max(new_size, Ordering::Relaxed);
        }
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Watch = Watch;

// ---- a small GGUF writer (gguf.md layout), enough to build valid and hostile files ----

#[derive(Default)]
struct Builder {
    version: u32,
    kv: Vec<u8>,
    n_kv: u64,
    infos: Vec<u8>,
    n_tensors: u64,
    data: Vec<u8>,
}

fn gstr(out: &mut Vec<u8>, s: &str) {
    out.extend((s.len() as u64).to_le_bytes());
    out.extend(s.as_bytes());
}

impl Builder {
    fn new() -> Self {
        Builder { version: 3, ..Default::default() }
    }
    /// A metadata entry with a raw type tag and raw value bytes.
    fn kv_raw(mut self, key: &str, ty: u32, value: &[u8]) -> Self {
        gstr(&mut self.kv, key);
        self.kv.extend(ty.to_le_bytes());
        self.kv.extend(value);
        self.n_kv += 1;
        self
    }
    fn kv_str(self, key: &str, v: &str) -> Self {
        let mut b = Vec::new();
        gstr(&mut b, v);
        self.kv_raw(key, 8, &b)
    }
    fn kv_u32(self, key: &str, v: u32) -> Self {
        self.kv_raw(key, 4, &v.to_le_bytes())
    }
    /// A tensor whose data is appended (aligned to 32) to the data section.
    fn tensor(mut self, name: &str, dims: &[u64], ty: u32, data: &[u8]) -> Self {
        while !self.data.len().is_multiple_of(32) {
            self.data.push(0);
        }
        let offset = self.data.len() as u64;
        self.data.extend(data);
        self.tensor_raw(name, dims, ty, offset)
    }
    fn tensor_raw(mut self, name: &str, dims: &[u64], ty: u32, offset: u64) -> Self {
        gstr(&mut self.infos, name);
        self.infos.extend((dims.len() as u32).to_le_bytes());
        for d in dims {
            self.infos.extend(d.to_le_bytes());
        }
        self.infos.extend(ty.to_le_bytes());
        self.infos.extend(offset.to_le_bytes());
        self.n_tensors += 1;
        self
    }
    fn header_with_counts(&self, n_tensors: u64, n_kv: u64) -> Vec<u8> {
        let mut out = b"GGUF".to_vec();
        out.extend(self.version.to_le_bytes());
        out.extend(n_tensors.to_le_bytes());
        out.extend(n_kv.to_le_bytes());
        out.extend(&self.kv);
        out.extend(&self.infos);
        out
    }
    fn bytes(&self) -> Vec<u8> {
        let mut out = self.header_with_counts(self.n_tensors, self.n_kv);
        if !self.data.is_empty() {
            while !out.len().is_multiple_of(32) {
                out.push(0);
            }
            out.extend(&self.data);
        }
        out
    }
}

/// A valid file with one key of every scalar type, arrays, and three tensors.
fn synthetic() -> Builder {
    let mut arr_str = 8u32.to_le_bytes().to_vec(); // element type string
    arr_str.extend(3u64.to_le_bytes());
    for s in ["a", "bé", ""] {
        gstr(&mut arr_str, s);
    }
    let mut arr_i32 = 5u32.to_le_bytes().to_vec();
    arr_i32.extend(2u64.to_le_bytes());
    arr_i32.extend((-7i32).to_le_bytes());
    arr_i32.extend(9i32.to_le_bytes());
    let mut nested = 9u32.to_le_bytes().to_vec(); // array of arrays of u8
    nested.extend(1u64.to_le_bytes());
    nested.extend(0u32.to_le_bytes());
    nested.extend(2u64.to_le_bytes());
    nested.extend([4u8, 5]);

    let f32_data: Vec<u8> = [1.0f32, -2.0, 0.5, 3.0].iter().flat_map(|v| v.to_le_bytes()).collect();
    // one q4_0 block: d = 1.0 (f16 0x3c00), nibbles 8 -> 0.0, high nibble 9 -> 1.0
    let mut q4 = vec![0x00, 0x3c];
    q4.extend([0x98u8; 16]);

    Builder::new()
        .kv_str("general.architecture", "testarch")
        .kv_raw("t.u8", 0, &[200])
        .kv_raw("t.i8", 1, &[0xfe])
        .kv_raw("t.u16", 2, &60000u16.to_le_bytes())
        .kv_raw("t.i16", 3, &(-300i16).to_le_bytes())
        .kv_u32("t.u32", 4_000_000_000)
        .kv_raw("t.i32", 5, &(-5i32).to_le_bytes())
        .kv_raw("t.f32", 6, &1.5f32.to_le_bytes())
        .kv_raw("t.bool", 7, &[1])
        .kv_raw("t.u64", 10, &u64::MAX.to_le_bytes())
        .kv_raw("t.i64", 11, &i64::MIN.to_le_bytes())
        .kv_raw("t.f64", 12, &0.25f64.to_le_bytes())
        .kv_raw("t.strs", 9, &arr_str)
        .kv_raw("t.ints", 9, &arr_i32)
        .kv_raw("t.nested", 9, &nested)
        .tensor("a.f32", &[2, 2], 0, &f32_data)
        .tensor("b.q4_0", &[32], 2, &q4)
        .tensor("c.empty", &[0, 3], 1, &[])
}

static COUNTER: AtomicUsize = AtomicUsize::new(0);

/// Writes `bytes` to a fresh file under the temp dir (removed on drop).
struct TempFile(PathBuf);
impl TempFile {
    fn new(bytes: &[u8]) -> TempFile {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("packlm-gguf-test-{}-{n}.gguf", std::process::id()));
        std::fs::write(&path, bytes).unwrap();
        TempFile(path)
    }
    fn rewrite(&self, bytes: &[u8]) {
        std::fs::write(&self.0, bytes).unwrap();
    }
}
impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn open_err(bytes: &[u8]) -> packlm::Error {
    let f = TempFile::new(bytes);
    match GgufFile::open(&f.0) {
        Ok(g) => panic!("opened a bad file: {g:?}"),
        Err(e) => e,
    }
}

fn assert_format_err(bytes: &[u8], needle: &str) {
    let e = open_err(bytes);
    assert_eq!(e.status, Status::ErrFormat, "{e}");
    assert!(e.message.contains(needle), "message {:?} should mention {needle:?}", e.message);
}

// ---- the synthetic file ----

#[test]
fn synthetic_file_parses() {
    let f = TempFile::new(&synthetic().bytes());
    let g = GgufFile::open(&f.0).unwrap();
    assert_eq!(g.version, 3);
    assert_eq!(g.architecture().unwrap(), "testarch");
    assert_eq!(g.get("t.u8"), Some(&GgufValue::U8(200)));
    assert_eq!(g.get("t.i8"), Some(&GgufValue::I8(-2)));
    assert_eq!(g.get("t.u16"), Some(&GgufValue::U16(60000)));
    assert_eq!(g.get("t.i16"), Some(&GgufValue::I16(-300)));
    assert_eq!(g.get("t.i64"), Some(&GgufValue::I64(i64::MIN)));
    assert_eq!(g.get_u64("t.u32").unwrap(), Some(4_000_000_000));
    assert_eq!(g.get_u64("t.u64").unwrap(), Some(u64::MAX));
    assert_eq!(g.get_u64("t.u8").unwrap(), Some(200));
    assert_eq!(g.get_f64("t.f32").unwrap(), Some(1.5));
    assert_eq!(g.get_f64("t.f64").unwrap(), Some(0.25));
    assert_eq!(g.get_f64("t.i32").unwrap(), Some(-5.0));
    assert_eq!(g.get_bool("t.bool").unwrap(), Some(true));
    assert_eq!(g.get_str("general.architecture").unwrap(), Some("testarch"));
    assert_eq!(g.get_str("absent").unwrap(), None);
    assert_eq!(g.get_u64("absent").unwrap(), None);
    let strs = g.get_array("t.strs").unwrap().unwrap();
    assert_eq!(strs, &[GgufValue::Str("a".into()), GgufValue::Str("bé".into()), GgufValue::Str("".into())]);
    assert_eq!(g.get("t.ints"), Some(&GgufValue::Array(vec![GgufValue::I32(-7), GgufValue::I32(9)])));
    assert_eq!(
        g.get("t.nested"),
        Some(&GgufValue::Array(vec![GgufValue::Array(vec![GgufValue::U8(4), GgufValue::U8(5)])]))
    );

    // the typed array getters read packed arrays without building values, and give the same
    // elements
    assert_eq!(g.get_str_array("t.strs").unwrap(), Some(vec!["a", "bé", ""]));
    assert_eq!(g.get_int_array("t.ints").unwrap(), Some(vec![-7, 9]));
    assert_eq!(g.get_str_array("absent").unwrap(), None);
    for (key, e) in [
        ("t.ints[0]", g.get_str_array("t.ints").unwrap_err()),
        ("t.strs[0]", g.get_int_array("t.strs").unwrap_err()),
        ("t.ints[0]", g.get_f32_array("t.ints").unwrap_err()),
        ("t.u8", g.get_str_array("t.u8").unwrap_err()),
    ] {
        assert_eq!(e.status, Status::ErrFormat);
        assert!(e.message.contains(key), "{e}");
    }

    // wrong types are ErrFormat naming the key
    for (key, e) in [
        ("t.u32", g.get_str("t.u32").unwrap_err()),
        ("t.i32", g.get_u64("t.i32").unwrap_err()),
        ("t.i64", g.get_u64("t.i64").unwrap_err()),
        ("t.strs", g.get_f64("t.strs").unwrap_err()),
        ("t.u8", g.get_bool("t.u8").unwrap_err()),
        ("general.architecture", g.get_array("general.architecture").unwrap_err()),
    ] {
        assert_eq!(e.status, Status::ErrFormat);
        assert!(e.message.contains(key), "{e}");
    }

    assert_eq!(g.tensors.len(), 3);
    let a = g.tensor("a.f32").unwrap();
    assert_eq!((a.dims.as_slice(), a.ty, a.n_bytes), (&[2u64, 2][..], WeightType::F32, 16));
    assert_eq!(a.offset % 32, 0);
    let mut row = [0f32; 2];
    dequantize_row(a.ty, &g.tensor_data(a)[8..16], &mut row);
    assert_eq!(row, [0.5, 3.0]);
    let b = g.tensor("b.q4_0").unwrap();
    assert_eq!((b.ty, b.n_bytes, b.offset - a.offset), (WeightType::Q4_0, 18, 32));
    let mut q = [0f32; 32];
    dequantize_row(b.ty, g.tensor_data(b), &mut q);
    assert_eq!((q[0], q[16]), (0.0, 1.0));
    let c = g.tensor("c.empty").unwrap();
    assert_eq!((c.n_bytes, g.tensor_data(c).len()), (0, 0));
}

#[test]
fn v2_is_accepted_and_alignment_is_honoured() {
    let mut b = synthetic().kv_u32("general.alignment", 64);
    b.version = 2;
    // rebuild with 64-byte alignment: pad the data start to 64 by hand
    let mut bytes = b.header_with_counts(b.n_tensors, b.n_kv);
    while !bytes.len().is_multiple_of(64) {
        bytes.push(0);
    }
    // offsets 0 and 32 are not all multiples of 64: the second tensor must be refused
    bytes.extend(&b.data);
    assert_format_err(&bytes, "alignment");

    let data: Vec<u8> = (0..16u8).collect();
    let mut b = Builder::new().kv_u32("general.alignment", 64).tensor_raw("x", &[4], 0, 0).tensor_raw("y", &[4], 0, 64);
    b.version = 2;
    let mut bytes = b.header_with_counts(b.n_tensors, b.n_kv);
    while !bytes.len().is_multiple_of(64) {
        bytes.push(0);
    }
    let start = bytes.len();
    bytes.extend(&data);
    bytes.resize(start + 64, 0);
    bytes.extend(&data);
    let f = TempFile::new(&bytes);
    let g = GgufFile::open(&f.0).unwrap();
    assert_eq!(g.version, 2);
    assert_eq!(g.tensors[0].offset, start);
    assert_eq!(g.tensors[1].offset, start + 64);
    assert_eq!(g.tensor_data(&g.tensors[1]), &data[..]);
}

// ---- truncation ----

#[test]
fn truncated_anywhere_is_err_format() {
    let bytes = synthetic().bytes();
    let f = TempFile::new(&bytes);
    for cut in 0..bytes.len() {
        f.rewrite(&bytes[..cut]);
        match GgufFile::open(&f.0) {
            Ok(_) => panic!("file cut at {cut} of {} bytes opened", bytes.len()),
            Err(e) => {
                assert_eq!(e.status, Status::ErrFormat, "cut at {cut}: {e}");
                assert!(e.message.contains(&f.0.display().to_string()), "cut at {cut}: {e}");
            }
        }
    }
    f.rewrite(&bytes);
    assert!(GgufFile::open(&f.0).is_ok());
}

#[test]
fn truncation_messages_say_what_was_being_read() {
    let bytes = synthetic().bytes();
    let e = open_err(&bytes[..6]);
    assert!(e.message.contains("version"), "{e}");
    let e = open_err(&bytes[..30]);
    assert!(e.message.contains("15 metadata entries cannot fit"), "{e}");
    let e = open_err(&bytes[..250]);
    assert!(e.message.contains("truncated: the value of metadata key 't.u64'"), "{e}");
    let e = open_err(&bytes[..bytes.len() - 1]);
    assert!(e.message.contains("c.empty") || e.message.contains("b.q4_0"), "{e}");
    assert!(e.message.contains("truncated"), "{e}");
}

// ---- hostile headers ----

/// Runs `f` while recording this thread's largest single allocation; returns it.
fn largest_allocation(f: impl FnOnce()) -> usize {
    LARGEST.store(0, Ordering::Relaxed);
    WATCHING.with(|w| w.set(true));
    f();
    WATCHING.with(|w| w.set(false));
    LARGEST.load(Ordering::Relaxed)
}

#[test]
fn hostile_counts_are_err_format_without_allocating() {
    let base = synthetic();
    let mut cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("2^62 tensors", base.header_with_counts(1 << 62, base.n_kv), "tensor infos"),
        ("2^62 metadata entries", base.header_with_counts(base.n_tensors, 1 << 62), "metadata entries"),
        ("u64::MAX tensors", base.header_with_counts(u64::MAX, base.n_kv), "tensor infos"),
    ];
    let mut huge_array = 0u32.to_le_bytes().to_vec();
    huge_array.extend((1u64 << 62).to_le_bytes());
    cases.push(("2^62-element array", Builder::new().kv_raw("k.arr", 9, &huge_array).bytes(), "k.arr"));
    let mut huge_str_array = 8u32.to_le_bytes().to_vec();
    huge_str_array.extend((1u64 << 40).to_le_bytes());
    cases.push(("2^40 strings", Builder::new().kv_raw("k.strs", 9, &huge_str_array).bytes(), "k.strs"));
    cases.push((
        "u64::MAX string length",
        Builder::new().kv_raw("k.s", 8, &u64::MAX.to_le_bytes()).bytes(),
        "k.s",
    ));
    let mut key = Vec::new();
    key.extend((1u64 << 50).to_le_bytes());
    let mut raw = base.header_with_counts(0, 1);
    raw.truncate(24);
    raw.extend(&key);
    raw.extend([0u8; 32]); // enough bytes that the entry count itself is plausible
    cases.push(("2^50 key length", raw, "key of metadata entry 0"));

    // the watch itself sees a large allocation (so a pass below is not vacuous)
    assert!(largest_allocation(|| drop(std::hint::black_box(vec![0u8; 2 << 20]))) >= 2 << 20);
    for (what, bytes, needle) in cases {
        let f = TempFile::new(&bytes);
        let mut err = None;
        let largest = largest_allocation(|| err = GgufFile::open(&f.0).err());
        let e = err.unwrap_or_else(|| panic!("{what}: opened"));
        assert_eq!(e.status, Status::ErrFormat, "{what}: {e}");
        assert!(e.message.contains(needle), "{what}: {e}");
        assert!(largest < 1 << 20, "{what}: allocated {largest} bytes at once");
    }
}

#[test]
fn hostile_shapes_and_offsets_are_err_format() {
    let data = vec![0u8; 64];
    let one = |dims: &[u64], ty: u32, off: u64| Builder::new().tensor_raw("w", dims, ty, off);
    let with_data = |b: Builder| {
        let mut bytes = b.bytes();
        while !bytes.len().is_multiple_of(32) {
            bytes.push(0);
        }
        bytes.extend(&data);
        bytes
    };
    assert_format_err(&with_data(one(&[1 << 40, 1 << 40, 1 << 40], 0, 0)), "overflow");
    assert_format_err(&with_data(one(&[u64::MAX], 0, 0)), "out of range");
    assert_format_err(&with_data(one(&[1, 1, 1, 1, 1], 0, 0)), "5 dimensions");
    assert_format_err(&with_data(one(&[4_000_000_000], 0, 0)), "past the end");
    assert_format_err(&with_data(one(&[33], 2, 0)), "whole number");
    assert_format_err(&with_data(one(&[4], 0, 64)), "past the end");
    assert_format_err(&with_data(one(&[4], 0, 8)), "alignment");
    assert_format_err(&with_data(one(&[4], 0, u64::MAX - 31)), "overflow");
    assert_format_err(&with_data(one(&[4], 0, 0).tensor_raw("w", &[4], 0, 32)), "twice");
}

#[test]
fn hostile_metadata_is_err_format() {
    assert_format_err(b"GGUX\x03\0\0\0", "not a GGUF");
    assert_format_err(b"", "empty");
    assert_format_err(&Builder::new().kv_raw("k.b", 7, &[2]).bytes(), "k.b");
    assert_format_err(&Builder::new().kv_raw("k.t", 13, &[0; 8]).bytes(), "unknown value type 13");
    assert_format_err(&Builder::new().kv_u32("k", 1).kv_u32("k", 2).bytes(), "twice");
    assert_format_err(&Builder::new().kv_u32("general.alignment", 0).bytes(), "general.alignment");
    assert_format_err(&Builder::new().kv_u32("general.alignment", 48).bytes(), "general.alignment");
    assert_format_err(&Builder::new().kv_str("general.alignment", "32").bytes(), "general.alignment");
    let mut bad_utf8 = 2u64.to_le_bytes().to_vec();
    bad_utf8.extend([0xc3, 0x28]);
    assert_format_err(&Builder::new().kv_raw("k.u", 8, &bad_utf8).bytes(), "k.u");
    // in an array of strings: a bad element, and a character split across two elements (each
    // invalid alone, though the bytes of both together are valid UTF-8)
    let strings = |parts: &[&[u8]]| {
        let mut a = 8u32.to_le_bytes().to_vec();
        a.extend((parts.len() as u64).to_le_bytes());
        for p in parts {
            a.extend((p.len() as u64).to_le_bytes());
            a.extend(*p);
        }
        a
    };
    let bad_element = strings(&[b"ok", &[0xc3, 0x28]]);
    assert_format_err(&Builder::new().kv_raw("k.arr", 9, &bad_element).bytes(), "element 1");
    let split = strings(&[b"a\xc3", &[0xa9]]);
    assert_format_err(&Builder::new().kv_raw("k.arr", 9, &split).bytes(), "element 0");
    // arrays of arrays 100 deep: refused by depth, not by the stack
    let mut deep = Vec::new();
    for _ in 0..100 {
        deep.extend(9u32.to_le_bytes());
        deep.extend(1u64.to_le_bytes());
    }
    deep.extend(0u32.to_le_bytes());
    deep.extend(0u64.to_le_bytes());
    assert_format_err(&Builder::new().kv_raw("k.deep", 9, &deep).bytes(), "nested");
    // a missing general.architecture is reported by architecture(), naming the key
    let f = TempFile::new(&Builder::new().bytes());
    let e = GgufFile::open(&f.0).unwrap().architecture().unwrap_err();
    assert_eq!(e.status, Status::ErrFormat);
    assert!(e.message.contains("general.architecture"), "{e}");
}

#[test]
fn unsupported_versions_and_types_are_err_unsupported() {
    for (version, needle) in [(1u32, "version 1"), (4, "version 4"), (0x0300_0000, "big-endian")] {
        let mut b = Builder::new();
        b.version = version;
        let e = open_err(&b.bytes());
        assert_eq!(e.status, Status::ErrUnsupported, "{e}");
        assert!(e.message.contains(needle), "{e}");
    }
    // ggml type 10 is Q2_K, which packlm does not implement
    let e = open_err(&Builder::new().tensor("blk.0.attn_q.weight", &[256], 10, &[0; 84]).bytes());
    assert_eq!(e.status, Status::ErrUnsupported, "{e}");
    assert!(e.message.contains("blk.0.attn_q.weight") && e.message.contains("type 10"), "{e}");
}

// ---- the real model ----

#[test]
fn smollm2_metadata_matches_gguf_py() {
    let Some(path) = smollm2() else { return };
    let g = GgufFile::open(&path).unwrap();
    // Every expected value below is what gguf-py 0.19.0's GGUFReader reports for this file
    // (sha256 b179c952...db53).
    assert_eq!(g.version, 3);
    assert_eq!(g.metadata.len(), 33);
    assert_eq!(g.tensors.len(), 272);
    assert_eq!(g.architecture().unwrap(), "llama");
    assert_eq!(g.get_str("general.name").unwrap(), Some("Smollm2 135M 8k Lc100K Mix1 Ep2"));
    assert_eq!(g.get_u64("llama.block_count").unwrap(), Some(30));
    assert_eq!(g.get_u64("llama.context_length").unwrap(), Some(8192));
    assert_eq!(g.get_u64("llama.embedding_length").unwrap(), Some(576));
    assert_eq!(g.get_u64("llama.feed_forward_length").unwrap(), Some(1536));
    assert_eq!(g.get_u64("llama.attention.head_count").unwrap(), Some(9));
    assert_eq!(g.get_u64("llama.attention.head_count_kv").unwrap(), Some(3));
    assert_eq!(g.get_u64("llama.rope.dimension_count").unwrap(), Some(64));
    assert_eq!(g.get_u64("llama.vocab_size").unwrap(), Some(49152));
    assert_eq!(g.get("llama.rope.freq_base"), Some(&GgufValue::F32(100000.0)));
    assert_eq!(g.get_f64("llama.attention.layer_norm_rms_epsilon").unwrap(), Some(9.999999747378752e-06));
    assert_eq!(g.get_bool("tokenizer.ggml.add_bos_token").unwrap(), Some(false));
    assert_eq!(g.get_bool("tokenizer.ggml.add_space_prefix").unwrap(), Some(false));
    assert_eq!(g.get_str("tokenizer.ggml.model").unwrap(), Some("gpt2"));
    assert_eq!(g.get_str("tokenizer.ggml.pre").unwrap(), Some("smollm"));
    assert_eq!(g.get("tokenizer.ggml.bos_token_id"), Some(&GgufValue::U32(1)));
    assert_eq!(g.get_u64("tokenizer.ggml.eos_token_id").unwrap(), Some(2));
    assert_eq!(g.get_u64("tokenizer.ggml.padding_token_id").unwrap(), Some(2));
    assert_eq!(g.get_u64("tokenizer.ggml.unknown_token_id").unwrap(), Some(0));
    let tokens = g.get_array("tokenizer.ggml.tokens").unwrap().unwrap();
    assert_eq!(tokens.len(), 49152);
    assert_eq!(tokens[0].as_str(), Some("<|endoftext|>"));
    assert_eq!(tokens[1].as_str(), Some("<|im_start|>"));
    assert_eq!(tokens[49151].as_str(), Some("ectable"));
    let merges = g.get_array("tokenizer.ggml.merges").unwrap().unwrap();
    assert_eq!(merges.len(), 48900);
    assert_eq!(merges[0].as_str(), Some("Ġ t"));
    let types = g.get_array("tokenizer.ggml.token_type").unwrap().unwrap();
    assert_eq!(types.iter().filter(|t| **t == GgufValue::I32(3)).count(), 17);
    assert_eq!(g.get_str("tokenizer.chat_template").unwrap().map(str::len), Some(368));
    assert_eq!(g.get_u64("general.quantization_version").unwrap(), Some(2));

    // tensor table, ggml order dims (gguf-py ReaderTensor.shape, data_offset, n_bytes)
    let t = &g.tensors[0];
    assert_eq!((t.name.as_str(), t.dims.as_slice(), t.ty), ("token_embd.weight", &[576u64, 49152][..], WeightType::Q8_0));
    assert_eq!((t.offset, t.n_bytes), (1785664, 30081024));
    let t = g.tensor("blk.0.ffn_down.weight").unwrap();
    assert_eq!((t.dims.as_slice(), t.ty, t.offset, t.n_bytes), (&[1536u64, 576][..], WeightType::Q4_1, 31868992, 552960));
    let t = g.tensor("output_norm.weight").unwrap();
    assert_eq!((t.dims.as_slice(), t.ty, t.offset, t.n_bytes), (&[576u64][..], WeightType::F32, 98360128, 2304));
    let count = |ty| g.tensors.iter().filter(|t| t.ty == ty).count();
    assert_eq!((count(WeightType::Q4_1), count(WeightType::F32), count(WeightType::Q8_0)), (210, 61, 1));
}

#[test]
fn smollm2_tensors_dequantize_like_gguf_py() {
    let Some(path) = smollm2() else { return };
    let g = GgufFile::open(&path).unwrap();
    // (tensor, first three and last three values as f32 bits) from gguf-py 0.19.0:
    // quants.dequantize(reader.tensors[i].data, type)
    let cases: [(&str, [u32; 3], [u32; 3]); 2] = [
        ("blk.0.ffn_down.weight", [0xbea96000, 0x3eb13000, 0x3d9a4000], [0xbe780000, 0xbdb89800, 0xbe39b800]),
        ("token_embd.weight", [0xbdda3400, 0x3d071400, 0x3d456c00], [0x3e03ab00, 0xbdf58b00, 0xbd2ad000]),
    ];
    for (name, first, last) in cases {
        let t = g.tensor(name).unwrap();
        let cols = t.dims[0] as usize;
        let row_bytes = t.ty.row_bytes(cols).unwrap();
        let data = g.tensor_data(t);
        let mut row = vec![0f32; cols];
        dequantize_row(t.ty, &data[..row_bytes], &mut row);
        assert_eq!(row[..3].iter().map(|v| v.to_bits()).collect::<Vec<_>>(), first, "{name} row 0");
        dequantize_row(t.ty, &data[data.len() - row_bytes..], &mut row);
        assert_eq!(row[cols - 3..].iter().map(|v| v.to_bits()).collect::<Vec<_>>(), last, "{name} last row");
    }
    let norm = g.tensor("blk.0.attn_norm.weight").unwrap();
    let mut v = vec![0f32; 576];
    dequantize_row(norm.ty, g.tensor_data(norm), &mut v);
    assert_eq!(v[..4].iter().map(|v| v.to_bits()).collect::<Vec<_>>(), [0x3c650000, 0x3cc30000, 0xbca20000, 0xbcf80000]);
}

// ---- split models (llama.cpp's gguf-split layout: split.no / split.count / split.tensors.count,
// files PREFIX-0000K-of-0000N.gguf) ----

/// Part `k` (from 0) of a 3-file split of four f32 tensors: the first file holds the model's
/// metadata, the others only the split keys (as gguf-split writes them).
fn split_part(k: u16, count: u16, no: u16) -> Vec<u8> {
    let f32s = |v: f32| -> Vec<u8> { [v, v + 1.0].iter().flat_map(|x| x.to_le_bytes()).collect() };
    let mut b = Builder::new();
    if k == 0 {
        b = b.kv_str("general.architecture", "testarch").kv_raw("split.tensors.count", 5, &4i32.to_le_bytes());
    }
    b = b.kv_raw("split.no", 2, &no.to_le_bytes()).kv_raw("split.count", 2, &count.to_le_bytes());
    match k {
        0 => b.tensor("t0", &[2], 0, &f32s(0.0)).tensor("t1", &[2], 0, &f32s(10.0)),
        1 => b.tensor("t2", &[2], 0, &f32s(20.0)),
        _ => b.tensor("t3", &[2], 0, &f32s(30.0)),
    }
    .bytes()
}

/// A temp dir removed on drop.
struct TempDir(PathBuf);
impl TempDir {
    fn new() -> TempDir {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("packlm-gguf-split-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&path).unwrap();
        TempDir(path)
    }
}
impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn a_split_model_opens_from_its_first_file() {
    let dir = TempDir::new();
    let name = |k: u16| dir.0.join(format!("m-{:05}-of-00003.gguf", k + 1));
    for k in 0..3 {
        std::fs::write(name(k), split_part(k, 3, k)).unwrap();
    }
    let g = GgufFile::open(&name(0)).unwrap();
    assert_eq!(g.architecture().unwrap(), "testarch");
    let names: Vec<&str> = g.tensors.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["t0", "t1", "t2", "t3"]);
    // Each tensor's bytes come from its own file: t_k holds 10k and 10k + 1.
    for (k, t) in g.tensors.iter().enumerate() {
        let v: Vec<f32> = g.tensor_data(t).chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect();
        assert_eq!(v, [10.0 * k as f32, 10.0 * k as f32 + 1.0], "{}", t.name);
    }
    assert_eq!(g.tensors.iter().map(|t| t.part).collect::<Vec<_>>(), [0, 0, 1, 2]);
    // The list form takes any names, in order.
    let listed: Vec<PathBuf> = (0..3).map(|k| dir.0.join(format!("any-{k}.gguf"))).collect();
    for (k, p) in listed.iter().enumerate() {
        std::fs::copy(name(k as u16), p).unwrap();
    }
    let l = GgufFile::open_splits(&listed).unwrap();
    assert_eq!(l.tensors.len(), 4);
    assert_eq!(l.tensor_data(&l.tensors[3]), g.tensor_data(&g.tensors[3]));
    // Opened from a later split: refused, naming the first.
    let e = GgufFile::open(&name(1)).unwrap_err();
    assert_eq!(e.status, Status::ErrFormat, "{e}");
    assert!(e.message.contains("split 2 of 3") && e.message.contains("m-00001-of-00003.gguf"), "{e}");
    // The list form: a wrong count, or the files out of order.
    let e = GgufFile::open_splits(&listed[..2]).unwrap_err();
    assert_eq!(e.status, Status::ErrInvalidArgument, "{e}");
    assert!(e.message.contains("2 split files given") && e.message.contains("has 3"), "{e}");
    let e = GgufFile::open_splits(&[listed[0].clone(), listed[2].clone(), listed[1].clone()]).unwrap_err();
    assert!(e.message.contains("expected split 2 of 3"), "{e}");
    // A missing split names its file.
    std::fs::remove_file(name(2)).unwrap();
    let e = GgufFile::open(&name(0)).unwrap_err();
    assert_eq!(e.status, Status::ErrIo, "{e}");
    assert!(e.message.contains("split 3 of 3") && e.message.contains("m-00003-of-00003.gguf"), "{e}");
    // A split whose split.no says another place.
    std::fs::write(name(2), split_part(2, 3, 1)).unwrap();
    let e = GgufFile::open(&name(0)).unwrap_err();
    assert!(e.message.contains("expected split 3 of 3") && e.message.contains("split.no 1"), "{e}");
    // A first split not named as one.
    let odd = dir.0.join("model.gguf");
    std::fs::copy(name(0), &odd).unwrap();
    let e = GgufFile::open(&odd).unwrap_err();
    assert!(e.message.contains("PREFIX-00001-of-00003.gguf"), "{e}");
    // A tensor in two splits.
    std::fs::write(name(2), {
        let mut b = Builder::new().kv_raw("split.no", 2, &2u16.to_le_bytes()).kv_raw("split.count", 2, &3u16.to_le_bytes());
        b = b.tensor("t1", &[2], 0, &[0u8; 8]);
        b.bytes()
    })
    .unwrap();
    let e = GgufFile::open(&name(0)).unwrap_err();
    assert!(e.message.contains("'t1' is also in an earlier split"), "{e}");
}
