//! Reading a pack's small files: regular files only (a FIFO would block open forever, a link to
//! a device such as /dev/zero would read without end), each kind with its own size cap, stated
//! here in one table and in the README. The caps are far above the largest real files (Gemma3's
//! 262k-entry tokenizer.json is 33 MB); a file above its cap gets `ErrLimitExceeded` naming the
//! file and the cap.

use std::fs::File;
use std::io::Read;
use std::path::Path;

use crate::error::{Error, Result, Status};

const MIB: u64 = 1024 * 1024;

/// The kinds of file a pack reads whole, with their caps in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileKind {
    /// config.json (a few KB in real packs).
    Config,
    /// tokenizer.json (tens of MB for 256k-entry vocabularies).
    Tokenizer,
    /// tokenizer_config.json (up to a few MB: it may list every added token and a template).
    TokenizerConfig,
    /// generation_config.json.
    GenerationConfig,
    /// chat_template.jinja.
    ChatTemplate,
    /// model.safetensors.index.json (one line per tensor).
    SafetensorsIndex,
}

impl FileKind {
    /// The one table of caps.
    pub fn cap(self) -> u64 {
        match self {
            FileKind::Config => 16 * MIB,
            FileKind::Tokenizer => 512 * MIB,
            FileKind::TokenizerConfig => 64 * MIB,
            FileKind::GenerationConfig => 16 * MIB,
            FileKind::ChatTemplate => 16 * MIB,
            FileKind::SafetensorsIndex => 64 * MIB,
        }
    }
}

/// Opens `path` for reading if it is a regular file (after following links). The open itself
/// does not block on a FIFO swapped in after the check (O_NONBLOCK), and the opened file is
/// checked again.
pub fn open_regular(path: &Path) -> Result<File> {
    let meta = std::fs::metadata(path).map_err(|e| Error::io(path, e))?;
    if !meta.is_file() {
        return Err(not_regular(path));
    }
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NONBLOCK);
    }
    let file = options.open(path).map_err(|e| Error::io(path, e))?;
    let meta = file.metadata().map_err(|e| Error::io(path, e))?;
    if !meta.is_file() {
        return Err(not_regular(path));
    }
    Ok(file)
}

fn not_regular(path: &Path) -> Error {
    Error::new(Status::ErrIo, format!("{}: not a regular file", path.display()))
}

/// The whole of a regular file of `kind`, refused above the kind's cap.
pub fn read_bytes(path: &Path, kind: FileKind) -> Result<Vec<u8>> {
    let file = open_regular(path)?;
    let cap = kind.cap();
    let too_big = || {
        Error::new(
            Status::ErrLimitExceeded,
            format!("{}: larger than the {} MiB allowed for a {kind:?} file", path.display(), cap / MIB),
        )
    };
    let len = file.metadata().map_err(|e| Error::io(path, e))?.len();
    if len > cap {
        return Err(too_big());
    }
    let mut out = Vec::new();
    // `len` is at most the cap; the read is bounded by cap + 1 whatever the file does meanwhile.
    out.try_reserve_exact(len as usize)
        .map_err(|_| Error::new(Status::ErrOutOfMemory, format!("{}: no memory for {len} bytes", path.display())))?;
    file.take(cap + 1).read_to_end(&mut out).map_err(|e| Error::io(path, e))?;
    if out.len() as u64 > cap {
        return Err(too_big());
    }
    Ok(out)
}

/// The whole of a regular UTF-8 text file of `kind`.
pub fn read_text(path: &Path, kind: FileKind) -> Result<String> {
    let bytes = read_bytes(path, kind)?;
    String::from_utf8(bytes)
        .map_err(|e| Error::new(Status::ErrUtf8, format!("{}: not UTF-8: {e}", path.display())))
}

/// Whether `path` exists at all (any kind of file, a dangling link included), so that a
/// present-but-unreadable optional file is an error rather than silently skipped.
pub fn exists(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok()
}
