//! `llama_model_load_from_file_ptr` and `llama_adapter_lora_init_from_file_ptr`: a GGUF given
//! as an open `FILE *`. llama.cpp reads the GGUF from the stream's current position (llama.h:
//! "so it can be embedded in a larger file") and leaves the stream open. packlm maps GGUF
//! files by path, from their first byte, so here (decision): a `FILE *` of a regular file at
//! position 0 is opened again by its descriptor's path (`/proc/self/fd/N`, Linux), the same
//! file, and loaded as by its path; the stream is neither moved nor closed. A stream at
//! another position (a GGUF embedded in a larger file), one that is not a regular file (a
//! pipe, a socket), or a system without `/proc/self/fd` is refused: NULL and a log line
//! saying which.

use std::ffi::{c_char, CString};
use std::ptr;

use crate::abi::ModelParams;
use crate::log::{error, guard};
use crate::lora::LlamaLora;
use crate::model::LlamaModel;

/// The path that opens the file behind `file` again, or why it cannot be taken.
unsafe fn reopen_path(file: *mut libc::FILE) -> Result<CString, String> {
    if file.is_null() {
        return Err("file is NULL".into());
    }
    let fd = libc::fileno(file);
    if fd < 0 {
        return Err("the FILE has no file descriptor".into());
    }
    let mut st: libc::stat = std::mem::zeroed();
    if libc::fstat(fd, &mut st) != 0 {
        return Err(format!("fstat of descriptor {fd} failed: {}", std::io::Error::last_os_error()));
    }
    if st.st_mode & libc::S_IFMT != libc::S_IFREG {
        return Err(format!("descriptor {fd} is not a regular file (a pipe or a socket?): a GGUF is mapped from a file"));
    }
    // ftello counts what stdio has buffered: the position a reader of the stream is at.
    let pos = libc::ftello(file);
    if pos != 0 {
        return Err(format!(
            "the FILE is at position {pos}: a GGUF embedded in a larger file (read from the current position, as llama.cpp does) is not supported; only a FILE at position 0 is taken"
        ));
    }
    let path = format!("/proc/self/fd/{fd}");
    if !std::path::Path::new(&path).exists() {
        return Err(format!("{path} does not exist: a FILE is reopened through /proc/self/fd, which this system lacks"));
    }
    CString::new(path).map_err(|e| e.to_string())
}

/// Loads the model in `file` (see the module's doc): what `llama_model_load_from_file` gives
/// for the file's path; NULL, logged, for a stream it does not take.
#[no_mangle]
pub unsafe extern "C" fn llama_model_load_from_file_ptr(file: *mut libc::FILE, params: ModelParams) -> *mut LlamaModel {
    const F: &str = "llama_model_load_from_file_ptr";
    guard(F, ptr::null_mut(), || match reopen_path(file) {
        Ok(path) => crate::model::load(F, path.as_ptr(), params),
        Err(why) => {
            error(F, &why);
            ptr::null_mut()
        }
    })
}

/// Loads the LoRA adapter in `file` for `model` (see the module's doc): what
/// `llama_adapter_lora_init` gives for the file's path; NULL, logged, for a stream it does
/// not take.
#[no_mangle]
pub unsafe extern "C" fn llama_adapter_lora_init_from_file_ptr(model: *mut LlamaModel, file: *mut libc::FILE) -> *mut LlamaLora {
    const F: &str = "llama_adapter_lora_init_from_file_ptr";
    guard(F, ptr::null_mut(), || match reopen_path(file) {
        Ok(path) => crate::lora::llama_adapter_lora_init(model, path.as_ptr() as *const c_char),
        Err(why) => {
            error(F, &why);
            ptr::null_mut()
        }
    })
}
