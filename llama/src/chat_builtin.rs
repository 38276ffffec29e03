//! llama.cpp's built-in chat templates: the fixed formats of `src/llama-chat.cpp` in the
//! llama.cpp that llama-cpp-python 0.3.36 vendors. Three things, all pure:
//!
//! - `NAMES`: the names `llama_chat_builtin_templates` lists (`LLM_CHAT_TEMPLATES`, a
//!   `std::map`, so in byte order);
//! - `detect` / `from_str`: how `llm_chat_detect_template` picks a format, from a name or from a
//!   model's Jinja text (substring rules, not a Jinja parser);
//! - `render`: the text `llm_chat_apply_template` makes of a chat in that format.
//!
//! The reference is llama.cpp's own output, recorded for every name by
//! tests/fixtures/llama_cpp/make_chat_fixtures.py; the tests below compare against it byte for
//! byte.

/// A message as the C API passes it: (role, content).
type Message<'a> = (&'a str, &'a str);

/// One llama.cpp chat format (`enum llm_chat_template`, less UNKNOWN).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Format {
    Bailing,
    BailingThink,
    Bailing2,
    Chatglm3,
    Chatglm4,
    Chatml,
    CommandR,
    Deepseek,
    DeepseekOcr,
    Deepseek2,
    Deepseek3,
    Dots1,
    ExaoneMoe,
    Exaone3,
    Exaone4,
    Falcon3,
    Gemma,
    Gigachat,
    Glmedge,
    GptOss,
    Granite3,
    Granite4_0,
    Granite4_1,
    Grok2,
    HunyuanDense,
    HunyuanMoe,
    HunyuanVl,
    KimiK2,
    Llama2,
    Llama2Sys,
    Llama2SysBos,
    Llama2SysStrip,
    Llama3,
    Llama4,
    Megrez,
    Minicpm,
    MistralV1,
    MistralV3,
    MistralV3Tekken,
    MistralV7,
    MistralV7Tekken,
    Monarch,
    Openchat,
    Orion,
    PanguEmbedded,
    Phi3,
    Phi4,
    RwkvWorld,
    SeedOss,
    Smolvlm,
    SolarOpen,
    Vicuna,
    VicunaOrca,
    Yandex,
    Zephyr,
}

/// `LLM_CHAT_TEMPLATES`, in its iteration (byte) order, which is the order of `NAMES`.
const LISTED: [(&str, Format); 54] = {
    use Format::*;
    [
        ("bailing", Bailing),
        ("bailing-think", BailingThink),
        ("bailing2", Bailing2),
        ("chatglm3", Chatglm3),
        ("chatglm4", Chatglm4),
        ("chatml", Chatml),
        ("command-r", CommandR),
        ("deepseek", Deepseek),
        ("deepseek-ocr", DeepseekOcr),
        ("deepseek2", Deepseek2),
        ("deepseek3", Deepseek3),
        ("exaone-moe", ExaoneMoe),
        ("exaone3", Exaone3),
        ("exaone4", Exaone4),
        ("falcon3", Falcon3),
        ("gemma", Gemma),
        ("gigachat", Gigachat),
        ("glmedge", Glmedge),
        ("gpt-oss", GptOss),
        ("granite", Granite3),
        ("granite-4.0", Granite4_0),
        ("granite-4.1", Granite4_1),
        ("grok-2", Grok2),
        ("hunyuan-dense", HunyuanDense),
        ("hunyuan-moe", HunyuanMoe),
        ("hunyuan-vl", HunyuanVl),
        ("kimi-k2", KimiK2),
        ("llama2", Llama2),
        ("llama2-sys", Llama2Sys),
        ("llama2-sys-bos", Llama2SysBos),
        ("llama2-sys-strip", Llama2SysStrip),
        ("llama3", Llama3),
        ("llama4", Llama4),
        ("megrez", Megrez),
        ("minicpm", Minicpm),
        ("mistral-v1", MistralV1),
        ("mistral-v3", MistralV3),
        ("mistral-v3-tekken", MistralV3Tekken),
        ("mistral-v7", MistralV7),
        ("mistral-v7-tekken", MistralV7Tekken),
        ("monarch", Monarch),
        ("openchat", Openchat),
        ("orion", Orion),
        ("pangu-embedded", PanguEmbedded),
        ("phi3", Phi3),
        ("phi4", Phi4),
        ("rwkv-world", RwkvWorld),
        ("seed_oss", SeedOss),
        ("smolvlm", Smolvlm),
        ("solar-open", SolarOpen),
        ("vicuna", Vicuna),
        ("vicuna-orca", VicunaOrca),
        ("yandex", Yandex),
        ("zephyr", Zephyr),
    ]
};

/// DOTS1 has a format and a detection rule (`<|endofuserprompt|>`) but no row in llama.cpp's
/// name table: `detect` can return "dots1" and `render` accepts it, while `from_str("dots1")`,
/// like llama.cpp, does not know it.
const DETECTED_ONLY: (&str, Format) = ("dots1", Format::Dots1);

const NAME_ARRAY: [&str; LISTED.len()] = {
    let mut names = [""; LISTED.len()];
    let mut i = 0;
    while i < LISTED.len() {
        names[i] = LISTED[i].0;
        i += 1;
    }
    names
};

/// The built-in template names, in the order llama_chat_builtin_templates lists them.
pub const NAMES: &[&str] = &NAME_ARRAY;

/// The text of `msgs` (role, content) under built-in template `name`; `add_ass` ends with the
/// assistant's opening where the format has one (several ignore it, as in llama.cpp).
/// None: `name` is neither a built-in nor "dots1" (llama.cpp's -1). llama.cpp refuses no chat
/// once the format is known, so a known name always renders.
pub fn render(name: &str, msgs: &[(&str, &str)], add_ass: bool) -> Option<String> {
    let (_, format) = *LISTED.iter().chain([&DETECTED_ONLY]).find(|(n, _)| *n == name)?;
    let mut out = String::new();
    format.write(msgs, add_ass, &mut out);
    Some(out)
}

/// llama.cpp's `llm_chat_template_from_str` as `llama_chat_apply_template` uses it: a listed
/// name is itself; any other text goes through `detect`.
pub fn from_str(tmpl: &str) -> Option<&'static str> {
    match NAMES.iter().find(|n| **n == tmpl) {
        Some(name) => Some(name),
        None => detect(tmpl),
    }
}

/// llama.cpp's detection of a template from a model's template text (the substring rules of
/// `llm_chat_detect_template`, in its order: the first rule that matches wins): the built-in
/// name it picks, or None (unknown). The name-table check that precedes them is `from_str`'s.
pub fn detect(template_text: &str) -> Option<&'static str> {
    detect_format(template_text).map(name_of)
}

fn name_of(format: Format) -> &'static str {
    // Every Format has a row, so the fallback is never taken.
    let rows = LISTED.iter().chain([&DETECTED_ONLY]);
    rows.map(|(n, f)| (*n, *f)).find(|(_, f)| *f == format).map_or("", |(n, _)| n)
}

fn detect_format(t: &str) -> Option<Format> {
    use Format::*;
    let has = |s: &str| t.contains(s);
    let any_of = |ss: &[&str]| ss.iter().any(|s| t.contains(s));
    let all_of = |ss: &[&str]| ss.iter().all(|s| t.contains(s));
    let format = if has("<|im_start|>") {
        // SmolVLM opens with <|im_start|> as its BOS but is not chatml.
        match () {
            _ if has("<|im_sep|>") => Phi4,
            _ if has("<end_of_utterance>") => Smolvlm,
            _ => Chatml,
        }
    } else if t.starts_with("mistral") || has("[INST]") {
        detect_inst(t)
    } else if all_of(&["<|assistant|>", "<|end|>"]) {
        Phi3
    } else if has("[gMASK]<sop>") {
        Chatglm4
    } else if all_of(&["<|assistant|>", "<|user|>"]) {
        match () {
            _ if has("<|tool_declare|>") => ExaoneMoe,
            _ if has("</s>") => Falcon3,
            _ => Glmedge,
        }
    } else if all_of(&["<|{{ item['role'] }}|>", "<|begin_of_image|>"]) {
        Glmedge
    } else if all_of(&["<|user|>", "<|endoftext|>"]) {
        Zephyr
    } else if has("bos_token + message['role']") {
        Monarch
    } else if has("<start_of_turn>") {
        Gemma
    } else if has("'\\n\\nAssistant: ' + eos_token") {
        Orion
    } else if has("GPT4 Correct ") {
        Openchat
    } else if all_of(&["USER: ", "ASSISTANT: "]) {
        if has("SYSTEM: ") {
            VicunaOrca
        } else {
            Vicuna
        }
    } else if all_of(&["### Instruction:", "<|EOT|>"]) {
        Deepseek
    } else if all_of(&["<|START_OF_TURN_TOKEN|>", "<|USER_TOKEN|>"]) {
        CommandR
    } else if all_of(&["<|start_header_id|>", "<|end_header_id|>"]) {
        Llama3
    } else if has("[gMASK]sop") {
        Chatglm3
    } else if has("<用户>") {
        Minicpm
    } else if has("'Assistant: ' + message['content'] + eos_token") {
        Deepseek2
    } else if all_of(&["<｜Assistant｜>", "<｜User｜>", "<｜end▁of▁sentence｜>"]) {
        Deepseek3
    } else if all_of(&["[|system|]", "[|assistant|]", "[|endofturn|]"]) {
        if has("[|tool|]") {
            Exaone4
        } else {
            Exaone3
        }
    } else if any_of(&["rwkv-world", "{{- 'User: ' + message['content']|trim + '\\n\\n' -}}"]) {
        RwkvWorld
    } else if has("<|start_of_role|>") {
        match () {
            _ if !any_of(&["<tool_call>", "<tools>"]) => Granite3,
            _ if has("g4_default_system_message") => Granite4_0,
            _ => Granite4_1,
        }
    } else if has("message['role'] + additional_special_tokens[0] + message['content'] + additional_special_tokens[1]") {
        Gigachat
    } else if has("<|role_start|>") {
        Megrez
    } else if has(" Ассистент:") {
        Yandex
    } else if all_of(&["<role>ASSISTANT</role>", "'HUMAN'"]) {
        Bailing
    } else if all_of(&["<role>ASSISTANT</role>", "\"HUMAN\"", "<think>"]) {
        BailingThink
    } else if all_of(&["<role>ASSISTANT</role>", "<role>HUMAN</role>", "<|role_end|>"]) {
        Bailing2
    } else if all_of(&["<|header_start|>", "<|header_end|>"]) {
        Llama4
    } else if has("<|endofuserprompt|>") {
        Dots1
    } else if all_of(&["<|extra_0|>", "<|extra_4|>"]) {
        HunyuanMoe
    } else if all_of(&["<|start|>", "<|channel|>"]) {
        GptOss
    } else if all_of(&["<｜hy_Assistant｜>", "<｜hy_begin▁of▁sentence｜>"]) {
        HunyuanVl
    } else if all_of(&["<｜hy_Assistant｜>", "<｜hy_place▁holder▁no▁3｜>"]) {
        HunyuanDense
    } else if has("<|im_assistant|>assistant<|im_middle|>") {
        KimiK2
    } else if has("<seed:bos>") {
        SeedOss
    } else if has("'Assistant: '  + message['content'] + '<|separator|>") {
        Grok2
    } else if has("[unused9]系统：[unused10]") {
        PanguEmbedded
    } else if all_of(&["<|begin|>", "<|end|>", "<|content|>"]) {
        SolarOpen
    } else {
        return None;
    };
    Some(format)
}

/// The `[INST]` family: Mistral's official v1/v3/v3-tekken/v7 templates (mistralai cookbook,
/// chat_templates.md), else llama2 and its variants. Detection never yields v7-tekken.
fn detect_inst(t: &str) -> Format {
    use Format::*;
    let has = |s: &str| t.contains(s);
    if has("[SYSTEM_PROMPT]") {
        MistralV7
    } else if has("' [INST] ' + system_message") || has("[AVAILABLE_TOOLS]") {
        if has(" [INST]") {
            MistralV1
        } else if has("\"[INST]\"") {
            MistralV3Tekken
        } else {
            MistralV3
        }
    } else if has("content.strip()") {
        Llama2SysStrip
    } else if has("bos_token + '[INST]") {
        Llama2SysBos
    } else if has("<<SYS>>") {
        Llama2Sys
    } else {
        Llama2
    }
}

/// llama.cpp's `trim`: C `isspace` in the "C" locale, which counts \v and \f (Rust's
/// `trim_ascii` does not count \v). Only ASCII bytes are trimmed, so UTF-8 stays whole.
fn trim(s: &str) -> &str {
    s.trim_matches(|c| matches!(c, ' ' | '\t' | '\n' | '\x0b' | '\x0c' | '\r'))
}

macro_rules! put {
    ($out:expr, $($s:expr),+ $(,)?) => {{ $($out.push_str($s);)+ }};
}

/// A format whose every message is `before + role + after + content + close`.
struct Tagged {
    head: &'static str,
    before: &'static str,
    after: &'static str,
    trim: bool,
    close: &'static str,
    /// The assistant's opening, written when `add_ass`.
    generation: &'static str,
}

fn tagged(out: &mut String, msgs: &[Message], add_ass: bool, f: Tagged) {
    out.push_str(f.head);
    for &(role, content) in msgs {
        put!(out, f.before, role, f.after, if f.trim { trim(content) } else { content }, f.close);
    }
    if add_ass {
        out.push_str(f.generation);
    }
}

/// How a format wraps one message of a role: text before, whether the content is trimmed,
/// text after. None drops the message.
type Wrap = Option<(&'static str, bool, &'static str)>;

/// A format in which each message's wrapping depends on its role alone.
fn by_role(out: &mut String, msgs: &[Message], wrap: impl Fn(&str) -> Wrap) {
    for &(role, content) in msgs {
        if let Some((before, trimmed, after)) = wrap(role) {
            put!(out, before, if trimmed { trim(content) } else { content }, after);
        }
    }
}

/// The leading system message, if the chat opens with one, and the messages after it.
fn split_system<'a>(msgs: &'a [Message<'a>]) -> (Option<&'a str>, &'a [Message<'a>]) {
    match msgs {
        [("system", content), rest @ ..] => (Some(content), rest),
        _ => (None, msgs),
    }
}

impl Format {
    fn write(self, msgs: &[Message], add_ass: bool, out: &mut String) {
        use Format::*;
        let tag = |head, before, after, trim, close, generation| Tagged { head, before, after, trim, close, generation };
        match self {
            Chatml => tagged(out, msgs, add_ass, tag("", "<|im_start|>", "\n", false, "<|im_end|>\n", "<|im_start|>assistant\n")),
            Phi3 => tagged(out, msgs, add_ass, tag("", "<|", "|>\n", false, "<|end|>\n", "<|assistant|>\n")),
            Phi4 => tagged(out, msgs, add_ass, tag("", "<|im_start|>", "<|im_sep|>", false, "<|im_end|>", "<|im_start|>assistant<|im_sep|>")),
            Falcon3 => tagged(out, msgs, add_ass, tag("", "<|", "|>\n", false, "\n", "<|assistant|>\n")),
            Zephyr => tagged(out, msgs, add_ass, tag("", "<|", "|>\n", false, "<|endoftext|>\n", "<|assistant|>\n")),
            Llama3 => tagged(out, msgs, add_ass, tag("", "<|start_header_id|>", "<|end_header_id|>\n\n", true, "<|eot_id|>", "<|start_header_id|>assistant<|end_header_id|>\n\n")),
            Llama4 => tagged(out, msgs, add_ass, tag("", "<|header_start|>", "<|header_end|>\n\n", true, "<|eot|>", "<|header_start|>assistant<|header_end|>\n\n")),
            Chatglm3 => tagged(out, msgs, add_ass, tag("[gMASK]sop", "<|", "|>\n ", false, "", "<|assistant|>")),
            Chatglm4 => tagged(out, msgs, add_ass, tag("[gMASK]<sop>", "<|", "|>\n", false, "", "<|assistant|>\n")),
            Glmedge => tagged(out, msgs, add_ass, tag("", "<|", "|>\n", false, "", "<|assistant|>")),
            Megrez => tagged(out, msgs, add_ass, tag("", "<|role_start|>", "<|role_end|>", false, "<|turn_end|>", "<|role_start|>assistant<|role_end|>")),
            SolarOpen => tagged(out, msgs, add_ass, tag("", "<|begin|>", "<|content|>", false, "<|end|>", "<|begin|>assistant")),
            MistralV1 | MistralV3 | MistralV3Tekken => mistral_v1_v3(self, msgs, out),
            MistralV7 | MistralV7Tekken => mistral_v7(self == MistralV7Tekken, msgs, out),
            Llama2 | Llama2Sys | Llama2SysBos | Llama2SysStrip => llama2(self, msgs, out),
            Gemma => gemma(msgs, add_ass, out),
            Orion => orion(msgs, out),
            Monarch | Openchat | RwkvWorld | Granite3 | Granite4_0 | Granite4_1 | GptOss | SeedOss => {
                role_in_text(self, msgs, add_ass, out)
            }
            Bailing | BailingThink | Bailing2 => bailing(self, msgs, add_ass, out),
            Gigachat | HunyuanDense | HunyuanVl | PanguEmbedded => leading_system(self, msgs, add_ass, out),
            _ => fixed_roles(self, msgs, add_ass, out),
        }
    }
}

/// Mistral v1/v3/v3-tekken: a turn opens with [INST] at the first message after an answer;
/// system and user text go inside it, any other role is the answer that closes it. v1 puts a
/// space before [INST] and [/INST], tekken no space after [INST]; v3 trims the answer.
fn mistral_v1_v3(format: Format, msgs: &[Message], out: &mut String) {
    let lead = if format == Format::MistralV1 { " " } else { "" };
    let trail = if format == Format::MistralV3Tekken { "" } else { " " };
    let mut in_turn = false;
    for &(role, content) in msgs {
        if !in_turn {
            put!(out, lead, "[INST]", trail);
            in_turn = true;
        }
        match role {
            "system" => put!(out, content, "\n\n"),
            "user" => put!(out, content, lead, "[/INST]"),
            _ => {
                let answer = if format == Format::MistralV3 { trim(content) } else { content };
                put!(out, trail, answer, "</s>");
                in_turn = false;
            }
        }
    }
}

/// Mistral v7 (Mistral-Large-Instruct-2411) and v7-tekken (Mistral-Small-3.1), which differs
/// only in having no space after each opening tag. Any role but system and user is an answer.
fn mistral_v7(tekken: bool, msgs: &[Message], out: &mut String) {
    let sp = if tekken { "" } else { " " };
    for &(role, content) in msgs {
        match role {
            "system" => put!(out, "[SYSTEM_PROMPT]", sp, content, "[/SYSTEM_PROMPT]"),
            "user" => put!(out, "[INST]", sp, content, "[/INST]"),
            _ => put!(out, sp, content, "</s>"),
        }
    }
}

/// llama2 (huggingface.co/blog/llama2): the text always opens with "[INST] " (BOS is the
/// tokenizer's); after an answer (any role but system and user) the next message reopens the
/// turn. Variants: -sys wraps system text in <<SYS>> (plain llama2 writes it bare), -sys-bos
/// writes <s> before each reopened [INST], -sys-strip trims every content.
fn llama2(format: Format, msgs: &[Message], out: &mut String) {
    use Format::*;
    let system_tags = format != Llama2;
    let reopen = if format == Llama2SysBos { "<s>[INST] " } else { "[INST] " };
    out.push_str("[INST] ");
    let mut in_turn = true;
    for &(role, content) in msgs {
        let content = if format == Llama2SysStrip { trim(content) } else { content };
        if !in_turn {
            out.push_str(reopen);
            in_turn = true;
        }
        match role {
            "system" if system_tags => put!(out, "<<SYS>>\n", content, "\n<</SYS>>\n\n"),
            "system" => put!(out, content, "\n"),
            "user" => put!(out, content, " [/INST]"),
            _ => {
                put!(out, content, "</s>");
                in_turn = false;
            }
        }
    }
}

/// Gemma (google/gemma-7b-it) has no system role: system texts, trimmed and concatenated, are
/// held until the next turn whose role (assistant written "model") is not "model".
fn gemma(msgs: &[Message], add_ass: bool, out: &mut String) {
    let mut system = String::new();
    for &(role, content) in msgs {
        if role == "system" {
            system.push_str(trim(content));
            continue;
        }
        let role = if role == "assistant" { "model" } else { role };
        put!(out, "<start_of_turn>", role, "\n");
        if !system.is_empty() && role != "model" {
            put!(out, &system, "\n\n");
            system.clear();
        }
        put!(out, trim(content), "<end_of_turn>\n");
    }
    if add_ass {
        out.push_str("<start_of_turn>model\n");
    }
}

/// Orion (OrionStarAI/Orion-14B-Chat): system texts are held for the next user turn; each user
/// turn already ends with the assistant's opening, so `add_ass` adds nothing.
fn orion(msgs: &[Message], out: &mut String) {
    let mut system = String::new();
    for &(role, content) in msgs {
        match role {
            "system" => system.push_str(content),
            "user" => {
                out.push_str("Human: ");
                if !system.is_empty() {
                    put!(out, &system, "\n\n");
                    system.clear();
                }
                put!(out, content, "\n\nAssistant: </s>");
            }
            _ => put!(out, content, "</s>"),
        }
    }
}

/// Formats that write the role itself, with a rule of their own.
fn role_in_text(format: Format, msgs: &[Message], add_ass: bool, out: &mut String) {
    use Format::*;
    for (i, &(role, content)) in msgs.iter().enumerate() {
        match format {
            // mlabonne/AlphaMonarch-7B: <s> inside the history, except before the first message.
            Monarch => put!(out, if i == 0 { "" } else { "<s>" }, role, "\n", content, "</s>\n"),
            // openchat/openchat-3.5-0106: C `toupper` of the role's first byte.
            Openchat if role == "system" => put!(out, content, "<|end_of_turn|>"),
            Openchat => put!(out, "GPT4 Correct ", &capitalize_first_byte(role), ": ", content, "<|end_of_turn|>"),
            // "\n\n" is the model's end of turn; the last user message gets the opening.
            RwkvWorld => match role {
                "system" => put!(out, "System: ", trim(content), "\n\n"),
                "user" if i + 1 == msgs.len() => put!(out, "User: ", trim(content), "\n\nAssistant:"),
                "user" => put!(out, "User: ", trim(content), "\n\n"),
                "assistant" => put!(out, "Assistant: ", trim(content), "\n\n"),
                _ => {}
            },
            Granite3 if role == "assistant_tool_call" => {
                put!(out, "<|start_of_role|>", role, "<|end_of_role|><|tool_call|>", content, "<|end_of_text|>\n")
            }
            Granite4_0 | Granite4_1 if role == "assistant_tool_call" => {
                put!(out, "<|start_of_role|>assistant<|end_of_role|><|tool_call|>", content, "<|end_of_text|>\n")
            }
            Granite3 | Granite4_0 | Granite4_1 => put!(out, "<|start_of_role|>", role, "<|end_of_role|>", content, "<|end_of_text|>\n"),
            // Harmony: an assistant message ends with <|return|>.
            GptOss => {
                let close = if role == "assistant" { "<|return|>" } else { "<|end|>" };
                put!(out, "<|start|>", role, "<|message|>", content, close)
            }
            SeedOss => {
                let content = if role == "assistant" { trim(content) } else { content };
                put!(out, "<seed:bos>", role, "\n", content, "<seed:eos>")
            }
            _ => unreachable!("role_in_text: {format:?}"),
        }
    }
    let generation = match format {
        Monarch => "<s>assistant\n",
        Openchat => "GPT4 Correct Assistant:",
        Granite3 | Granite4_0 | Granite4_1 => "<|start_of_role|>assistant<|end_of_role|>",
        GptOss => "<|start|>assistant",
        SeedOss => "<seed:bos>assistant\n",
        _ => "",
    };
    if add_ass {
        out.push_str(generation);
    }
}

/// C `toupper` on the first byte only, in the "C" locale: ASCII letters alone change.
fn capitalize_first_byte(role: &str) -> String {
    let mut role = role.to_owned();
    if let Some(first) = role.get_mut(0..1) {
        first.make_ascii_uppercase();
    }
    role
}

/// Bailing (Ling/Ring) and Bailing2 (Ling 2.0): the role in ASCII capitals, user written HUMAN.
/// Bailing2 opens with a system turn of its own when the chat has none first.
fn bailing(format: Format, msgs: &[Message], add_ass: bool, out: &mut String) {
    let close = if format == Format::Bailing2 { "<|role_end|>" } else { "" };
    if format == Format::Bailing2 && msgs.first().map(|m| m.0) != Some("system") {
        out.push_str("<role>SYSTEM</role>detailed thinking off<|role_end|>");
    }
    for &(role, content) in msgs {
        let role = if role == "user" { "HUMAN".to_owned() } else { role.to_ascii_uppercase() };
        put!(out, "<role>", &role, "</role>", content, close);
    }
    if add_ass {
        out.push_str("<role>ASSISTANT</role>");
        if format == Format::BailingThink {
            out.push_str("<think>");
        }
    }
}

/// Formats that treat a system message at the start of the chat apart from the rest.
fn leading_system(format: Format, msgs: &[Message], add_ass: bool, out: &mut String) {
    use Format::*;
    let (system, rest) = split_system(msgs);
    match format {
        // Later system messages are dropped.
        Gigachat => {
            put!(out, "<s>", system.unwrap_or(""), if system.is_some() { "<|message_sep|>" } else { "" });
            by_role(out, rest, |role| match role {
                "user" => Some(("user<|role_sep|>", false, "<|message_sep|>available functions<|role_sep|>[]<|message_sep|>")),
                "assistant" => Some(("assistant<|role_sep|>", false, "<|message_sep|>")),
                _ => None,
            });
            if add_ass {
                out.push_str("assistant<|role_sep|>");
            }
        }
        // tencent/Hunyuan-4B-Instruct; no assistant opening (each user turn ends with it).
        HunyuanDense => {
            if let Some(system) = system {
                put!(out, system, "<｜hy_place▁holder▁no▁3｜>");
            }
            by_role(out, rest, |role| match role {
                "assistant" => Some(("<｜hy_Assistant｜>", false, "<｜hy_place▁holder▁no▁2｜>")),
                "user" => Some(("<｜hy_User｜>", false, "<｜hy_Assistant｜>")),
                _ => None,
            });
        }
        // tencent/HunyuanOCR and HunyuanVL: the role tag follows the content; no opening.
        HunyuanVl => {
            out.push_str("<｜hy_begin▁of▁sentence｜>");
            if let Some(system) = system {
                put!(out, system, "<｜hy_place▁holder▁no▁3｜>");
            }
            by_role(out, rest, |role| match role {
                "user" => Some(("", false, "<｜hy_User｜>")),
                "assistant" => Some(("", false, "<｜hy_Assistant｜>")),
                _ => None,
            });
        }
        // A chat that does not open with a system message gets an empty one; later system
        // messages are kept.
        PanguEmbedded => {
            if !msgs.is_empty() && system.is_none() {
                out.push_str("[unused9]系统：[unused10]");
            }
            by_role(out, msgs, |role| match role {
                "system" => Some(("[unused9]系统：", false, "[unused10]")),
                "user" => Some(("[unused9]用户：", false, "[unused10]")),
                "assistant" => Some(("[unused9]助手：", false, "[unused10]")),
                "tool" => Some(("[unused9]工具：", false, "[unused10]")),
                "function" => Some(("[unused9]方法：", false, "[unused10]")),
                _ => None,
            });
            if add_ass {
                out.push_str("[unused9]助手：");
            }
        }
        _ => unreachable!("leading_system: {format:?}"),
    }
}

/// Formats with fixed text per role; a role they do not name is dropped unless said otherwise.
fn fixed_roles(format: Format, msgs: &[Message], add_ass: bool, out: &mut String) {
    use Format::*;
    let (head, generation): (&str, &str) = match format {
        CommandR => ("", "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>"),
        Vicuna | VicunaOrca => ("", "ASSISTANT:"),
        Deepseek => ("", "### Response:\n"),
        Deepseek2 => ("", "Assistant:"),
        Deepseek3 => ("", "<｜Assistant｜>"),
        Exaone3 | Exaone4 => ("", "[|assistant|]"),
        ExaoneMoe => ("", "<|assistant|>\n"),
        Yandex => ("", " Ассистент:[SEP]"),
        Smolvlm => ("<|im_start|>", "Assistant:"),
        Dots1 => ("", "<|response|>"),
        KimiK2 => ("", "<|im_assistant|>assistant<|im_middle|>"),
        Grok2 => ("", "Assistant:"),
        // No assistant opening: Minicpm's and Hunyuan-MoE's user turns end with it.
        Minicpm | DeepseekOcr | HunyuanMoe => ("", ""),
        _ => unreachable!("fixed_roles: {format:?}"),
    };
    out.push_str(head);
    by_role(out, msgs, |role| wrap(format, role));
    if add_ass {
        out.push_str(generation);
    }
}

fn wrap(format: Format, role: &str) -> Wrap {
    use Format::*;
    let w = |before, trimmed, after| Some((before, trimmed, after));
    match (format, role) {
        // CohereForAI/c4ai-command-r-plus
        (CommandR, "system") => w("<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|>", true, "<|END_OF_TURN_TOKEN|>"),
        (CommandR, "user") => w("<|START_OF_TURN_TOKEN|><|USER_TOKEN|>", true, "<|END_OF_TURN_TOKEN|>"),
        (CommandR, "assistant") => w("<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>", true, "<|END_OF_TURN_TOKEN|>"),
        // eachadea/vicuna-13b-1.1; the Orca variant prefixes the system message.
        (Vicuna, "system") => w("", false, "\n\n"),
        (VicunaOrca, "system") => w("SYSTEM: ", false, "\n"),
        (Vicuna | VicunaOrca, "user") => w("USER: ", false, "\n"),
        (Vicuna | VicunaOrca, "assistant") => w("ASSISTANT: ", false, "</s>\n"),
        // deepseek-ai/deepseek-coder-33b-instruct, DeepSeek-V2, DeepSeek-V3
        (Deepseek, "system") => w("", false, ""),
        (Deepseek, "user") => w("### Instruction:\n", false, "\n"),
        (Deepseek, "assistant") => w("### Response:\n", false, "\n<|EOT|>\n"),
        (Deepseek2 | Deepseek3, "system") => w("", false, "\n\n"),
        (Deepseek2, "user") => w("User: ", false, "\n\n"),
        (Deepseek2, "assistant") => w("Assistant: ", false, "<｜end▁of▁sentence｜>"),
        (Deepseek3, "user") => w("<｜User｜>", false, ""),
        (Deepseek3, "assistant") => w("<｜Assistant｜>", false, "<｜end▁of▁sentence｜>"),
        (DeepseekOcr, _) => w("", false, ""),
        // LGAI-EXAONE 3.0 (no tool role), 4.0, and the MoE's <|...|> tags
        (Exaone3 | Exaone4, "system") => w("[|system|]", true, "[|endofturn|]\n"),
        (Exaone3 | Exaone4, "user") => w("[|user|]", true, "\n"),
        (Exaone3 | Exaone4, "assistant") => w("[|assistant|]", true, "[|endofturn|]\n"),
        (Exaone4, "tool") => w("[|tool|]", true, "[|endofturn|]\n"),
        (ExaoneMoe, "system") => w("<|system|>\n", true, "<|endofturn|>\n"),
        (ExaoneMoe, "user") => w("<|user|>\n", true, "<|endofturn|>\n"),
        (ExaoneMoe, "assistant") => w("<|assistant|>\n", true, "<|endofturn|>\n"),
        (ExaoneMoe, "tool") => w("<|tool|>\n", true, "<|endofturn|>\n"),
        // "\n\n" is the model's end of turn.
        (Yandex, "user") => w(" Пользователь: ", false, "\n\n"),
        (Yandex, "assistant") => w(" Ассистент: ", false, "\n\n"),
        // <|im_start|> is SmolVLM's BOS; every role but system and user is the assistant.
        (Smolvlm, "system") => w("", false, "\n\n"),
        (Smolvlm, "user") => w("User: ", false, "<end_of_utterance>\n"),
        (Smolvlm, _) => w("Assistant: ", false, "<end_of_utterance>\n"),
        // dots.llm1.inst: every role but system and user is the response.
        (Dots1, "system") => w("<|system|>", false, "<|endofsystem|>"),
        (Dots1, "user") => w("<|userprompt|>", false, "<|endofuserprompt|>"),
        (Dots1, _) => w("<|response|>", false, "<|endofresponse|>"),
        // tencent/Hunyuan-A13B-Instruct: every role but system and assistant is the user.
        (HunyuanMoe, "system") => w("<|startoftext|>", false, "<|extra_4|>"),
        (HunyuanMoe, "assistant") => w("", false, "<|eos|>"),
        (HunyuanMoe, _) => w("<|startoftext|>", false, "<|extra_0|>"),
        // moonshotai/Kimi-K2-Instruct: an unknown role keeps its content, with no opening tag.
        (KimiK2, "system") => w("<|im_system|>system<|im_middle|>", false, "<|im_end|>"),
        (KimiK2, "user") => w("<|im_user|>user<|im_middle|>", false, "<|im_end|>"),
        (KimiK2, "assistant") => w("<|im_assistant|>assistant<|im_middle|>", false, "<|im_end|>"),
        (KimiK2, "tool") => w("<|im_system|>tool<|im_middle|>", false, "<|im_end|>"),
        (KimiK2, _) => w("", false, "<|im_end|>"),
        // Grok 2 trims system and user text but not the assistant's.
        (Grok2, "system") => w("System: ", true, "<|separator|>\n\n"),
        (Grok2, "user") => w("Human: ", true, "<|separator|>\n\n"),
        (Grok2, "assistant") => w("Assistant: ", false, "<|separator|>\n\n"),
        // MiniCPM-3B-OpenHermes-2.5-v2: every role but user is written bare.
        (Minicpm, "user") => w("<用户>", true, "<AI>"),
        (Minicpm, _) => w("", true, ""),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn fixture() -> Value {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/llama_cpp/chat_templates.json");
        let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
        serde_json::from_str(&text).expect("chat_templates.json is JSON")
    }

    #[test]
    fn names_are_llama_cpps_in_its_order() {
        let fixture = fixture();
        let names: Vec<&str> = fixture["names"].as_array().unwrap().iter().map(|n| n.as_str().unwrap()).collect();
        assert_eq!(NAMES, names.as_slice());
        assert_eq!(NAMES.len(), 54);
    }

    #[test]
    fn every_template_renders_as_llama_cpp_does() {
        let fixture = fixture();
        let chats: Vec<Vec<(String, String)>> = fixture["chats"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                let msgs = c.as_array().unwrap().iter();
                msgs.map(|m| (m[0].as_str().unwrap().to_owned(), m[1].as_str().unwrap().to_owned())).collect()
            })
            .collect();
        assert_eq!(chats.len(), 3);
        let (mut passed, mut failed) = (0, Vec::new());
        for name in NAMES {
            for (ci, chat) in chats.iter().enumerate() {
                let msgs: Vec<(&str, &str)> = chat.iter().map(|(r, c)| (r.as_str(), c.as_str())).collect();
                for add_ass in [false, true] {
                    let want = fixture["rendered"][name][ci][add_ass as usize].as_str();
                    let got = render(name, &msgs, add_ass);
                    if got.as_deref() == want {
                        passed += 1;
                    } else {
                        failed.push(format!("{name} chat {ci} add_ass {add_ass}:\n  want {want:?}\n  got  {got:?}"));
                    }
                }
            }
        }
        assert!(failed.is_empty(), "{} of {} differ:\n{}", failed.len(), passed + failed.len(), failed.join("\n"));
        assert_eq!(passed, 54 * 3 * 2);
    }

    #[test]
    fn every_name_is_itself_and_renders() {
        for name in NAMES {
            assert_eq!(from_str(name), Some(*name), "{name}");
            assert!(render(name, &[], true).is_some(), "{name}");
        }
    }

    #[test]
    fn unknown_names_are_refused() {
        assert_eq!(render("chatml2", &[("user", "hi")], true), None);
        assert_eq!(render("", &[], false), None);
        assert_eq!(from_str("no template here"), None);
        assert_eq!(detect(""), None);
    }

    #[test]
    fn dots1_is_detected_and_rendered_but_not_listed() {
        assert!(!NAMES.contains(&"dots1"));
        assert_eq!(detect("{{ '<|userprompt|>' + m['content'] + '<|endofuserprompt|>' }}"), Some("dots1"));
        // llama.cpp: "dots1" is not in the name table, and as text it matches no rule.
        assert_eq!(from_str("dots1"), None);
        let got = render("dots1", &[("system", "s"), ("user", "u"), ("assistant", "a")], true);
        assert_eq!(got.as_deref(), Some("<|system|>s<|endofsystem|><|userprompt|>u<|endofuserprompt|><|response|>a<|endofresponse|><|response|>"));
    }

    /// Expectations read from llm_chat_detect_template (llama.cpp src/llama-chat.cpp).
    #[test]
    fn detection_follows_llama_cpps_rules() {
        let cases: &[(&str, Option<&str>)] = &[
            ("{% for m in messages %}{{'<|im_start|>' + m['role'] + '\n'}}{% endfor %}", Some("chatml")),
            ("<|im_start|>{{ role }}<|im_sep|>", Some("phi4")),
            ("<|im_start|>User:<end_of_utterance>", Some("smolvlm")),
            // <|im_start|> is tested first, so it wins over [INST].
            ("<|im_start|>[INST]", Some("chatml")),
            ("[SYSTEM_PROMPT]{{ m }}[/SYSTEM_PROMPT][INST]", Some("mistral-v7")),
            ("{{ bos_token + ' [INST] ' + system_message }}", Some("mistral-v1")),
            ("[AVAILABLE_TOOLS]{{ \"[INST]\" + content }}", Some("mistral-v3-tekken")),
            ("[AVAILABLE_TOOLS]{{ '[INST]' + content }}", Some("mistral-v3")),
            ("{{ '[INST] ' + content.strip() + ' [/INST]' }}<<SYS>>", Some("llama2-sys-strip")),
            ("{{ bos_token + '[INST] ' + content }}<<SYS>>", Some("llama2-sys-bos")),
            ("{{ '[INST] <<SYS>>\\n' + system }}", Some("llama2-sys")),
            ("{{ '[INST] ' + content + ' [/INST]' }}", Some("llama2")),
            // Text starting with "mistral" is in the [INST] family even without [INST].
            ("mistral-v2", Some("llama2")),
            ("<|user|>{{ c }}<|end|><|assistant|>", Some("phi3")),
            ("[gMASK]<sop><|user|>", Some("chatglm4")),
            ("[gMASK]sop<|user|>", Some("chatglm3")),
            ("<|user|>\n</s><|assistant|>", Some("falcon3")),
            ("<|user|><|assistant|>", Some("glmedge")),
            ("<|tool_declare|><|user|><|assistant|>", Some("exaone-moe")),
            ("<|user|>\n{{ c }}<|endoftext|>", Some("zephyr")),
            ("{{ bos_token + message['role'] + '\\n' }}", Some("monarch")),
            ("{{ '<start_of_turn>' + role + '\n' }}", Some("gemma")),
            ("{{ 'GPT4 Correct User: ' }}", Some("openchat")),
            ("USER: {{ u }} ASSISTANT: ", Some("vicuna")),
            ("SYSTEM: {{ s }} USER: {{ u }} ASSISTANT: ", Some("vicuna-orca")),
            ("### Instruction:\n{{ c }}<|EOT|>", Some("deepseek")),
            ("<|START_OF_TURN_TOKEN|><|USER_TOKEN|>", Some("command-r")),
            ("<|start_header_id|>{{ role }}<|end_header_id|>", Some("llama3")),
            ("<|start_header_id|>{{ role }}", None),
            ("<用户>{{ c }}<AI>", Some("minicpm")),
            ("<｜User｜>{{ c }}<｜Assistant｜>{{ a }}<｜end▁of▁sentence｜>", Some("deepseek3")),
            ("[|system|][|assistant|][|endofturn|]", Some("exaone3")),
            ("[|system|][|assistant|][|endofturn|][|tool|]", Some("exaone4")),
            ("<|start_of_role|>user<|end_of_role|>", Some("granite")),
            ("<|start_of_role|><tools>", Some("granite-4.1")),
            ("<|start_of_role|><tool_call>g4_default_system_message", Some("granite-4.0")),
            ("<|header_start|>user<|header_end|>", Some("llama4")),
            ("<|start|>assistant<|channel|>final", Some("gpt-oss")),
            ("<|im_assistant|>assistant<|im_middle|>", Some("kimi-k2")),
            ("<seed:bos>user", Some("seed_oss")),
            ("<|begin|>user<|content|>hi<|end|>", Some("solar-open")),
            ("{{ messages }}", None),
        ];
        for (text, want) in cases {
            assert_eq!(detect(text), *want, "{text:?}");
            assert_eq!(from_str(text), *want, "{text:?}");
        }
    }

    /// Cases the fixture's chats do not reach; expectations read from llm_chat_apply_template.
    #[test]
    fn edge_rules_from_the_source() {
        // C isspace trims \v and \f as well.
        assert_eq!(render("llama3", &[("user", "\x0b hi\x0c")], false).unwrap(), "<|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>");
        // openchat uppercases only the first byte of the role.
        assert_eq!(render("openchat", &[("tool", "x")], false).unwrap(), "GPT4 Correct Tool: x<|end_of_turn|>");
        // llama2 opens with "[INST] " even for an empty chat, and ignores add_ass.
        assert_eq!(render("llama2", &[], true).unwrap(), "[INST] ");
        // rwkv-world: the opening follows a last user message, whatever add_ass says.
        assert_eq!(render("rwkv-world", &[("user", "hi")], false).unwrap(), "User: hi\n\nAssistant:");
        // gemma holds system text past a model turn, to the next user turn.
        let got = render("gemma", &[("system", "s"), ("assistant", "a"), ("user", "u")], false).unwrap();
        assert_eq!(got, "<start_of_turn>model\na<end_of_turn>\n<start_of_turn>user\ns\n\nu<end_of_turn>\n");
        // pangu-embedded adds an empty system turn before a chat that lacks one, not to an empty chat.
        assert_eq!(render("pangu-embedded", &[], false).unwrap(), "");
        assert_eq!(render("pangu-embedded", &[("user", "u")], false).unwrap(), "[unused9]系统：[unused10][unused9]用户：u[unused10]");
        // kimi-k2 keeps an unknown role's content without an opening tag.
        assert_eq!(render("kimi-k2", &[("other", "x")], false).unwrap(), "x<|im_end|>");
    }
}
