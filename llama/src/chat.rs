//! `llama_chat_apply_template` and `llama_chat_builtin_templates`.
//!
//! `tmpl` is read as llama.cpp reads it, with one addition: the text of an open model's own
//! template (what `llama_model_chat_template` returned, or an equal string) is rendered by that
//! model's Jinja template through packlm (`Model::chat_apply`), the template the model was
//! trained with, where llama.cpp guesses a built-in format from substrings of it. Any other
//! text is a built-in name or, as in llama.cpp, detected from its substrings
//! (`chat_builtin::from_str`); NULL is "chatml". The result is written as llama.cpp writes it:
//! the whole length is returned, and at most `length` bytes copied (strncpy: no NUL when it
//! does not fit, so a caller compares the result with its buffer and calls again).

use std::ffi::{c_char, CStr};
use std::sync::Mutex;

use crate::abi::ChatMessage;
use crate::chat_builtin;
use crate::log::{error, guard};
use crate::model::LlamaModel;

/// The models open now (their addresses), so that a template text can be matched to its model.
static OPEN: Mutex<Vec<usize>> = Mutex::new(Vec::new());

pub fn opened(model: *const LlamaModel) {
    OPEN.lock().unwrap_or_else(|e| e.into_inner()).push(model as usize);
}

pub fn closed(model: *const LlamaModel) {
    OPEN.lock().unwrap_or_else(|e| e.into_inner()).retain(|&m| m != model as usize);
}

/// The text of `msgs` under `tmpl`, or None (unknown template, or the model's template failed:
/// logged).
fn render(f: &str, tmpl: &str, msgs: &[(&str, &str)], add_ass: bool) -> Option<String> {
    {
        let open = OPEN.lock().unwrap_or_else(|e| e.into_inner());
        for &m in open.iter() {
            // SAFETY: a registered model is live until llama_model_free unregisters it, and
            // freeing a model while another thread still uses it is the caller's error.
            let m = unsafe { &*(m as *const LlamaModel) };
            if m.template.as_ref().is_some_and(|t| t.as_bytes() == tmpl.as_bytes()) {
                return match m.engine.chat_apply(msgs, add_ass) {
                    Ok(text) => Some(text),
                    Err(e) => {
                        error(f, &format!("the model's chat template: {e}"));
                        None
                    }
                };
            }
        }
    }
    chat_builtin::render(chat_builtin::from_str(tmpl)?, msgs, add_ass)
}

#[no_mangle]
pub unsafe extern "C" fn llama_chat_apply_template(tmpl: *const c_char, chat: *const ChatMessage, n_msg: usize, add_ass: bool, buf: *mut c_char, length: i32) -> i32 {
    const F: &str = "llama_chat_apply_template";
    guard(F, -1, || {
        let tmpl = if tmpl.is_null() { "chatml".to_string() } else { CStr::from_ptr(tmpl).to_string_lossy().into_owned() };
        if n_msg > 0 && chat.is_null() {
            error(F, &format!("chat is NULL with n_msg {n_msg}"));
            return -1;
        }
        let mut owned = Vec::with_capacity(n_msg);
        for i in 0..n_msg {
            let m = &*chat.add(i);
            if m.role.is_null() || m.content.is_null() {
                error(F, &format!("message {i} has a NULL role or content"));
                return -1;
            }
            owned.push((CStr::from_ptr(m.role).to_string_lossy().into_owned(), CStr::from_ptr(m.content).to_string_lossy().into_owned()));
        }
        let msgs: Vec<(&str, &str)> = owned.iter().map(|(r, c)| (r.as_str(), c.as_str())).collect();
        let Some(text) = render(F, &tmpl, &msgs, add_ass) else {
            return -1;
        };
        let Ok(n) = i32::try_from(text.len()) else {
            error(F, &format!("the rendered chat is {} bytes", text.len()));
            return -1;
        };
        if !buf.is_null() && length > 0 {
            // strncpy: the text's bytes, then NULs up to `length` where it is shorter.
            let dst = std::slice::from_raw_parts_mut(buf as *mut u8, length as usize);
            let k = text.len().min(dst.len());
            dst[..k].copy_from_slice(&text.as_bytes()[..k]);
            dst[k..].fill(0);
        }
        n
    })
}

#[no_mangle]
pub unsafe extern "C" fn llama_chat_builtin_templates(output: *mut *const c_char, len: usize) -> i32 {
    guard("llama_chat_builtin_templates", -1, || {
        static NAMES: std::sync::OnceLock<Vec<std::ffi::CString>> = std::sync::OnceLock::new();
        let names = NAMES.get_or_init(|| chat_builtin::NAMES.iter().map(|n| std::ffi::CString::new(*n).unwrap_or_default()).collect());
        if !output.is_null() {
            for (i, n) in names.iter().take(len).enumerate() {
                *output.add(i) = n.as_ptr();
            }
        }
        names.len() as i32
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CString;

    fn apply(tmpl: Option<&str>, msgs: &[(&str, &str)], add_ass: bool, cap: usize) -> (i32, Vec<u8>) {
        let cs: Vec<(CString, CString)> = msgs.iter().map(|(r, c)| (CString::new(*r).unwrap(), CString::new(*c).unwrap())).collect();
        let chat: Vec<ChatMessage> = cs.iter().map(|(r, c)| ChatMessage { role: r.as_ptr(), content: c.as_ptr() }).collect();
        let t = tmpl.map(|t| CString::new(t).unwrap());
        let mut buf = vec![0x55u8; cap];
        let n = unsafe { llama_chat_apply_template(t.as_ref().map_or(std::ptr::null(), |t| t.as_ptr()), chat.as_ptr(), chat.len(), add_ass, buf.as_mut_ptr() as *mut c_char, cap as i32) };
        (n, buf)
    }

    const CHAT: [(&str, &str); 2] = [("user", "Hi"), ("assistant", "Hello")];

    /// NULL is chatml; the length is the whole text's; a short buffer gets its first bytes and
    /// no NUL (strncpy), a long one the text and NULs.
    #[test]
    fn null_is_chatml_and_the_buffer_is_filled_as_strncpy_does() {
        let want = "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello<|im_end|>\n<|im_start|>assistant\n";
        let (n, buf) = apply(None, &CHAT, true, 200);
        assert_eq!(n as usize, want.len());
        assert_eq!(&buf[..want.len()], want.as_bytes());
        assert!(buf[want.len()..].iter().all(|&b| b == 0));
        let (n, buf) = apply(Some("chatml"), &CHAT, true, 10);
        assert_eq!(n as usize, want.len());
        assert_eq!(&buf, &want.as_bytes()[..10]);
    }

    #[test]
    fn an_unknown_template_is_minus_one() {
        assert_eq!(apply(Some("no such template"), &CHAT, false, 64).0, -1);
    }

    /// A model's own template text is rendered by its Jinja template: SmolLM2's template,
    /// through llama_model_chat_template, gives what packlm's chat_apply gives (its Jinja
    /// template puts a default system message first, which llama.cpp's chatml guess omits).
    #[test]
    fn a_models_own_template_is_its_jinja_template() {
        let file = concat!(env!("CARGO_MANIFEST_DIR"), "/../models/SmolLM2-135M-Instruct.Q4_1.gguf");
        if !std::path::Path::new(file).exists() {
            assert!(std::env::var_os("PACKLM_REQUIRE_MODELS").is_none(), "{file} is missing");
            eprintln!("note: {file} absent; the model-template case is not run");
            return;
        }
        let path = CString::new(file).unwrap();
        unsafe {
            let params = crate::abi::ModelParams { vocab_only: true, ..crate::model::llama_model_default_params() };
            let model = crate::model::llama_model_load_from_file(path.as_ptr(), params);
            assert!(!model.is_null());
            let t = crate::model::llama_model_chat_template(model, std::ptr::null());
            assert!(!t.is_null(), "SmolLM2 has a chat template");
            let text = CStr::from_ptr(t).to_str().unwrap().to_string();
            let want = (*model).engine.chat_apply(&CHAT, true).unwrap();
            assert!(want.starts_with("<|im_start|>system\n"), "{want:?}");
            let (n, buf) = apply(Some(&text), &CHAT, true, want.len() + 1);
            assert_eq!(n as usize, want.len());
            assert_eq!(&buf[..want.len()], want.as_bytes());
            // An equal string in another buffer is that model's template too; once the model is
            // freed the same text is guessed as llama.cpp guesses it (chatml here).
            crate::model::llama_model_free(model);
            let (n, buf) = apply(Some(&text), &CHAT, true, 400);
            let chatml = chat_builtin::render("chatml", &CHAT, true).unwrap();
            assert_eq!((n as usize, &buf[..chatml.len()]), (chatml.len(), chatml.as_bytes()));
        }
    }

    #[test]
    fn the_builtin_list_is_the_module_list() {
        let n = unsafe { llama_chat_builtin_templates(std::ptr::null_mut(), 0) };
        assert_eq!(n as usize, chat_builtin::NAMES.len());
        let mut out = vec![std::ptr::null(); n as usize];
        unsafe { llama_chat_builtin_templates(out.as_mut_ptr(), out.len()) };
        let got: Vec<&str> = out.iter().map(|&p| unsafe { CStr::from_ptr(p) }.to_str().unwrap()).collect();
        assert_eq!(got, chat_builtin::NAMES);
    }
}
