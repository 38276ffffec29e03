//! Snapshot bytes: a session's exact state, portable across sessions and processes of the same
//! model. Little-endian throughout:
//!
//! ```text
//! header   magic "PKLMSNAP" (8) | format version u32 | model fingerprint u64 (the model's
//!          snapshot_fingerprint: config, tensor table and tensor bytes) |
//!          positions held u64 | layers u32
//! tokens   positions x u32                                   (the token history)
//! layers   per layer: source u8 (0 own plane, 1 shared: no data) | kv_width u32 |
//!          own: K positions x kv_width f32, then V the same
//! trailer  FNV-1a 64 of every byte before it
//! ```
//!
//! Every plane is stored whole, sliding layers included: a restored session may be truncated
//! to any shorter prefix, which needs the keys before the window too. Decoding validates every
//! field against the model before anything is handed back, so a failed restore leaves the
//! session as it was.

use crate::error::{Error, Result, Status};
use crate::kv::KvStore;
use crate::semantics::{KvSource, LayerSpec};

pub const MAGIC: &[u8; 8] = b"PKLMSNAP";
pub const FORMAT_VERSION: u32 = 1;
const HEADER_BYTES: usize = 8 + 4 + 8 + 8 + 4;

/// FNV-1a, 64-bit: detects any single flipped bit and is stable across platforms.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// Size in bytes of the snapshot of `kv` (outside a pass).
pub fn encoded_len(kv: &dyn KvStore) -> usize {
    let widths: Vec<Option<usize>> = (0..kv.n_layers()).map(|l| kv.plane_width(l)).collect();
    // A store that holds its positions has a length that fits.
    encoded_len_at(&widths, kv.positions()).unwrap_or(usize::MAX)
}

/// Size in bytes of a snapshot holding `positions` positions over planes of `widths` (None
/// for a layer without its own plane); None when it overflows.
pub fn encoded_len_at(widths: &[Option<usize>], positions: usize) -> Option<usize> {
    let mut len = positions.checked_mul(4)?.checked_add(HEADER_BYTES + 8)?;
    for w in widths {
        let plane = match w {
            Some(w) => positions.checked_mul(*w)?.checked_mul(2 * 4)?,
            None => 0,
        };
        len = len.checked_add(1 + 4)?.checked_add(plane)?;
    }
    Some(len)
}

/// The snapshot of `kv` and its token history (`tokens.len() == kv.positions()`).
pub fn encode(kv: &dyn KvStore, tokens: &[u32], fingerprint: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(encoded_len(kv));
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    out.extend_from_slice(&fingerprint.to_le_bytes());
    out.extend_from_slice(&(kv.positions() as u64).to_le_bytes());
    out.extend_from_slice(&(kv.n_layers() as u32).to_le_bytes());
    for t in tokens {
        out.extend_from_slice(&t.to_le_bytes());
    }
    for layer in 0..kv.n_layers() {
        match kv.plane_width(layer) {
            Some(width) => {
                out.push(0);
                out.extend_from_slice(&(width as u32).to_le_bytes());
                kv.export_plane(layer, &mut |k, v| {
                    for x in k.iter().chain(v) {
                        out.extend_from_slice(&x.to_le_bytes());
                    }
                });
            }
            None => {
                out.push(1);
                out.extend_from_slice(&0u32.to_le_bytes());
            }
        }
    }
    let sum = fnv1a64(&out);
    out.extend_from_slice(&sum.to_le_bytes());
    out
}

/// A decoded, validated snapshot, ready for `KvStore::import`.
pub struct Decoded {
    /// Per layer: `(keys, values)`, `positions x kv_width` each; None for a shared layer.
    pub planes: Vec<Option<(Vec<f32>, Vec<f32>)>>,
    pub positions: usize,
    pub tokens: Vec<u32>,
}

fn bad(msg: impl Into<String>) -> Error {
    Error::new(Status::ErrSnapshot, msg)
}

/// Reads little-endian fields, refusing to run past the end.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8]> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.bytes.len()).ok_or_else(|| {
            bad(format!("snapshot ends inside {what} (at byte {}, {} bytes long)", self.at, self.bytes.len()))
        })?;
        let s = &self.bytes[self.at..end];
        self.at = end;
        Ok(s)
    }
    fn u32(&mut self, what: &str) -> Result<u32> {
        let b = self.take(4, what)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn u64(&mut self, what: &str) -> Result<u64> {
        let b = self.take(8, what)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }
    fn f32s(&mut self, n: usize, what: &str) -> Result<Vec<f32>> {
        let len = n.checked_mul(4).ok_or_else(|| bad(format!("{what}: size overflows")))?;
        let b = self.take(len, what)?;
        Ok(b.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect())
    }
}

/// Refuses a plane holding NaN or an infinity: a session's own passes never store one, and it
/// would turn every later logit into NaN.
fn finite(plane: &[f32], width: usize, layer: usize, what: &str) -> Result<()> {
    match plane.iter().position(|x| !x.is_finite()) {
        Some(i) => Err(bad(format!("layer {layer}: {what} at position {}, column {} is {}", i / width, i % width, plane[i]))),
        None => Ok(()),
    }
}

/// Decodes and validates a snapshot against the model (`layers`, `fingerprint`, `vocab`,
/// `n_ctx`); returns the planes, positions held and the token history.
pub fn decode(bytes: &[u8], layers: &[LayerSpec], fingerprint: u64, vocab: usize, n_ctx: usize) -> Result<Decoded> {
    if bytes.len() < HEADER_BYTES + 8 {
        return Err(bad(format!("snapshot of {} bytes is shorter than its header", bytes.len())));
    }
    if &bytes[..8] != MAGIC {
        return Err(bad("not a packlm snapshot (magic bytes differ)"));
    }
    let mut r = Reader { bytes, at: 8 };
    let version = r.u32("format version")?;
    if version != FORMAT_VERSION {
        return Err(bad(format!("snapshot format version {version}; this library reads {FORMAT_VERSION}")));
    }
    let (body, trailer) = bytes.split_at(bytes.len() - 8);
    let mut sum = [0u8; 8];
    sum.copy_from_slice(trailer);
    // The checksum is checked before any size field is trusted, so a flipped bit anywhere is
    // reported as corruption rather than as whatever the flipped field would say.
    if fnv1a64(body) != u64::from_le_bytes(sum) {
        return Err(bad("snapshot checksum mismatch: the bytes are corrupted or truncated"));
    }
    let fp = r.u64("model fingerprint")?;
    if fp != fingerprint {
        return Err(bad(format!("snapshot is of another model (fingerprint {fp:016x}, this model {fingerprint:016x})")));
    }
    let n_past = usize::try_from(r.u64("positions held")?).map_err(|_| bad("positions held overflows"))?;
    if n_past > n_ctx {
        return Err(bad(format!("snapshot holds {n_past} positions; the session's context is {n_ctx}")));
    }
    let n_layers = r.u32("layer count")? as usize;
    if n_layers != layers.len() {
        return Err(bad(format!("snapshot has {n_layers} layers; the model has {}", layers.len())));
    }
    let mut tokens = Vec::with_capacity(n_past);
    for i in 0..n_past {
        let t = r.u32("token history")?;
        if t as usize >= vocab {
            return Err(bad(format!("token {i} of the history is {t}, outside the vocabulary of {vocab}")));
        }
        tokens.push(t);
    }
    let mut planes = Vec::with_capacity(n_layers);
    for (il, spec) in layers.iter().enumerate() {
        let source = r.take(1, "layer source")?[0];
        let width = r.u32("layer width")? as usize;
        match (source, spec.kv_source) {
            (0, KvSource::Own) => {
                if width != spec.kv_width() {
                    return Err(bad(format!("layer {il}: plane width {width}, the model's is {}", spec.kv_width())));
                }
                let n = n_past.checked_mul(width).ok_or_else(|| bad("plane size overflows"))?;
                let k = r.f32s(n, &format!("layer {il} keys"))?;
                let v = r.f32s(n, &format!("layer {il} values"))?;
                finite(&k, width, il, "key")?;
                finite(&v, width, il, "value")?;
                planes.push(Some((k, v)));
            }
            (1, KvSource::SharedWith { .. }) if width == 0 => planes.push(None),
            _ => return Err(bad(format!("layer {il}: plane kind {source} does not match the model's layer"))),
        }
    }
    if r.at != body.len() {
        return Err(bad(format!("{} unexpected bytes after the last layer", body.len() - r.at)));
    }
    Ok(Decoded { planes, positions: n_past, tokens })
}
