//! The filters, functions and methods a chat template may call, each behind a rule that
//! measures what the call will build before minijinja's own implementation builds it (and
//! checks the shape of what some of them return). The rules are upper bounds: a call is
//! charged at most what it can build, never less.

use std::sync::Arc;

use minijinja::value::{ArgType, Rest, Value, ValueKind};
use minijinja::{Environment, Error, State};

use crate::error::Status;
use crate::pack::chat_guard::{debug_len, is_namespace, text_len, Budget, Forbid, ELEMENT_BYTES};

/// What a call may build, from its arguments (the first is the filtered value or the method's
/// receiver; a trailing keyword-argument map is part of `args`).
type Rule = fn(&Budget, &Call) -> Result<usize, Error>;

/// One call's arguments, as its rule sees them.
struct Call<'a> {
    name: &'static str,
    args: &'a [Value],
}

impl Call<'_> {
    fn value(&self) -> Option<&Value> {
        self.args.first().filter(|v| !v.is_kwargs())
    }

    /// Positional argument `i` (0 is the value), else the keyword argument `key`.
    fn arg(&self, i: usize, key: &str) -> Option<Value> {
        let positional = self.args.get(i).filter(|v| !v.is_kwargs()).cloned();
        positional.or_else(|| {
            self.args
                .last()
                .filter(|v| v.is_kwargs())
                .and_then(|kw| kw.get_attr(key).ok())
                .filter(|v| !v.is_undefined())
        })
    }

    /// Every argument, keyword values included.
    fn all(&self) -> Vec<Value> {
        let mut out = Vec::new();
        for v in self.args {
            if v.is_kwargs() {
                if let Ok(values) = v.try_iter() {
                    out.extend(values.filter_map(|k| v.get_item(&k).ok()));
                }
            } else {
                out.push(v.clone());
            }
        }
        out
    }
}

/// Printed length of `v`, or more than the budget has left.
fn text(b: &Budget, v: Option<&Value>) -> usize {
    match v {
        Some(v) => text_len(v, b.bytes_left()).unwrap_or(usize::MAX),
        None => 0,
    }
}

/// Elements of a list-like value (characters of a string, keys of a map).
fn length(b: &Budget, v: Option<&Value>) -> usize {
    let Some(v) = v else { return 0 };
    if let Some(s) = v.as_str() {
        return s.chars().count();
    }
    match v.len() {
        Some(n) => n,
        // An iterable of unknown length: counted, up to what the budget could hold.
        None => match v.try_iter() {
            Ok(items) => {
                let cap = b.bytes_left() / ELEMENT_BYTES + 1;
                items.take(cap).count()
            }
            Err(_) => 0,
        },
    }
}

/// A count argument as the filter reads it (`usize`), or 0 when it is not one (the filter
/// then refuses it itself).
fn count_arg(v: Option<Value>) -> usize {
    v.as_ref().and_then(|v| <usize as ArgType>::from_value(Some(v)).ok()).unwrap_or(0)
}

/// The largest number among the arguments (a width may come from one: `{:{}}`).
fn largest_number(args: &[Value]) -> usize {
    args.iter()
        .filter(|v| v.kind() == ValueKind::Number)
        .map(|v| v.as_i64().map(|n| n.unsigned_abs() as usize).or_else(|| f64::try_from(v.clone()).ok().map(|f| f.abs().min(usize::MAX as f64) as usize)).unwrap_or(usize::MAX))
        .max()
        .unwrap_or(0)
}

/// The numbers written in `spec` (widths and precisions), saturating.
fn numbers(spec: &str) -> Vec<usize> {
    let mut out = Vec::new();
    let mut current: Option<usize> = None;
    for c in spec.chars().chain(std::iter::once(' ')) {
        match c.to_digit(10) {
            Some(d) => current = Some(current.unwrap_or(0).saturating_mul(10).saturating_add(d as usize)),
            None => out.extend(current.take()),
        }
    }
    out
}

/// The fields of a format string: their count, the text of their specs (where widths and
/// precisions are written), and whether a width or precision is taken from an argument.
struct Fields {
    count: usize,
    specs: String,
    from_argument: bool,
}

/// printf fields (`%-10.3f`, `%(name)s`, `%*d`); `%%` is a literal.
fn printf_fields(format: &str) -> Fields {
    let mut f = Fields { count: 0, specs: String::new(), from_argument: false };
    let mut chars = format.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '%' {
            continue;
        }
        if chars.peek() == Some(&'%') {
            chars.next();
            continue;
        }
        f.count += 1;
        if chars.peek() == Some(&'(') {
            for c in chars.by_ref() {
                if c == ')' {
                    break;
                }
            }
        }
        // Flags, width, precision and length, up to the conversion letter.
        while let Some(&c) = chars.peek() {
            if c.is_ascii_alphabetic() && !matches!(c, 'h' | 'l' | 'L') {
                break;
            }
            f.from_argument |= c == '*';
            f.specs.push(c);
            chars.next();
        }
        f.specs.push(' ');
    }
    f
}

/// `str.format` fields (`{0:>10}`, `{:{}}`); `{{` is a literal.
fn str_format_fields(format: &str) -> Fields {
    let mut f = Fields { count: 0, specs: String::new(), from_argument: false };
    let mut chars = format.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '{' {
            continue;
        }
        if chars.peek() == Some(&'{') {
            chars.next();
            continue;
        }
        f.count += 1;
        let (mut depth, mut in_spec) = (1usize, false);
        for c in chars.by_ref() {
            match c {
                '{' => {
                    depth += 1;
                    f.from_argument = true;
                }
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        break;
                    }
                }
                ':' if depth == 1 => in_spec = true,
                _ if in_spec => f.specs.push(c),
                _ => {}
            }
        }
        f.specs.push(' ');
    }
    f
}

/// The widest width or precision Rust's formatting takes (minijinja formats with it).
const MAX_FORMAT_NUMBER: usize = u16::MAX as usize;

/// A format string's output bound: its own text, and per field the widths written in it, the
/// largest number argument where a width comes from one, and the longest argument printed or in
/// debug form (a field may repeat an argument). A width or precision over 65535 is refused:
/// Rust's formatting, which minijinja uses, does not take one.
fn format_bound(b: &Budget, name: &str, format: &str, fields: Fields, args: &[Value]) -> Result<usize, Error> {
    let written = numbers(&fields.specs);
    let from_args = if fields.from_argument { largest_number(args) } else { 0 };
    if let Some(&n) = written.iter().chain([&from_args]).find(|&&n| n > MAX_FORMAT_NUMBER) {
        return Err(b.refuse(
            Status::ErrLimitExceeded,
            format!("{name}: a width or precision of {n}, over the {MAX_FORMAT_NUMBER} formatting takes"),
        ));
    }
    let longest = args
        .iter()
        .map(|v| text_len(v, b.bytes_left()).unwrap_or(usize::MAX).max(debug_len(v, b.bytes_left()).unwrap_or(usize::MAX)))
        .max()
        .unwrap_or(0);
    let per_field = longest.saturating_add(from_args).saturating_add(64);
    let written: usize = written.iter().fold(0, |t, &n| t.saturating_add(n));
    Ok(format.len().saturating_add(written).saturating_add(fields.count.saturating_mul(per_field)))
}

/// `"%5s"|format(...)`.
fn printf_rule(b: &Budget, c: &Call) -> Result<usize, Error> {
    let Some(format) = c.value().and_then(|v| v.as_str().map(str::to_string)) else { return Ok(text(b, c.value())) };
    format_bound(b, "`format`", &format, printf_fields(&format), c.all().get(1..).unwrap_or_default())
}

/// `"{:5}".format(...)`.
fn str_format_rule(b: &Budget, c: &Call) -> Result<usize, Error> {
    let Some(format) = c.value().and_then(|v| v.as_str().map(str::to_string)) else { return Ok(0) };
    format_bound(b, "`.format()`", &format, str_format_fields(&format), c.all().get(1..).unwrap_or_default())
}

fn indent_rule(b: &Budget, c: &Call) -> Result<usize, Error> {
    let width = count_arg(c.arg(1, "width").or(Some(Value::from(4))));
    let len = text(b, c.value());
    let lines = match c.value().and_then(|v| v.as_str()) {
        Some(s) => s.matches('\n').count() + 1,
        None => len.saturating_add(1),
    };
    Ok(len.saturating_add(lines.saturating_mul(width.saturating_add(1))))
}

/// `replace(old, new)`: exact for a string (its matches counted), else as if every position matched.
fn replace_rule(b: &Budget, c: &Call) -> Result<usize, Error> {
    let (value, old, new) = (c.value(), c.arg(1, "old"), c.arg(2, "new"));
    let len = text(b, value);
    let new_len = text(b, new.as_ref());
    let matches = match (value.and_then(|v| v.as_str()), old.as_ref().and_then(|v| v.as_str())) {
        (Some(s), Some("")) => s.chars().count() + 1,
        (Some(s), Some(old)) => s.matches(old).count(),
        _ => len.saturating_add(1),
    };
    Ok(len.saturating_add(matches.saturating_mul(new_len)))
}

/// `join(sep)` / `sep.join(items)`: every item printed plus a separator between.
fn join_items(b: &Budget, items: Option<&Value>, sep: usize) -> Result<usize, Error> {
    let Some(items) = items else { return Ok(0) };
    if items.as_str().is_some() {
        let n = length(b, Some(items));
        return Ok(text(b, Some(items)).saturating_add(n.saturating_mul(sep)));
    }
    let mut total = 0usize;
    let left = b.bytes_left();
    for item in items.try_iter()? {
        // With `join(attribute=...)` an item contributes one of its parts: at most its whole text.
        total = total.saturating_add(text(b, Some(&item))).saturating_add(sep);
        if total > left {
            return Ok(usize::MAX);
        }
    }
    Ok(total)
}

fn join_rule(b: &Budget, c: &Call) -> Result<usize, Error> {
    let sep = text(b, c.arg(1, "d").as_ref());
    join_items(b, c.value(), sep)
}

fn str_join_rule(b: &Budget, c: &Call) -> Result<usize, Error> {
    let sep = text(b, c.value());
    join_items(b, c.args.get(1), sep)
}

/// `split` / `lines` / `.split()` / `.splitlines()`: one list element per piece, plus the text.
fn split_rule(b: &Budget, c: &Call) -> Result<usize, Error> {
    let len = text(b, c.value());
    let pieces = match (c.value().and_then(|v| v.as_str()), c.arg(1, "sep").as_ref().and_then(|v| v.as_str())) {
        (Some(s), Some(sep)) => s.split(sep).count(),
        (Some(s), None) if c.name.contains("lines") => s.lines().count() + 1,
        (Some(s), None) => s.split_whitespace().count() + 1,
        _ => len.saturating_add(2),
    };
    let pieces = match c.arg(2, "maxsplit").and_then(|v| v.as_i64()).filter(|&m| m >= 0) {
        Some(m) => pieces.min((m as usize).saturating_add(1)),
        None => pieces,
    };
    Ok(len.saturating_add(pieces.saturating_mul(ELEMENT_BYTES)))
}

/// Text in, text out, at most `k` bytes out per byte in (case mapping can triple a character's
/// bytes; HTML escaping turns one byte into at most six).
fn times_1(b: &Budget, c: &Call) -> Result<usize, Error> {
    Ok(text(b, c.value()))
}
fn times_3(b: &Budget, c: &Call) -> Result<usize, Error> {
    Ok(text(b, c.value()).saturating_mul(3))
}
fn times_6(b: &Budget, c: &Call) -> Result<usize, Error> {
    Ok(text(b, c.value()).saturating_mul(6))
}
/// Every argument printed (small results: `pluralize`, `filesizeformat`, `truncate`...).
fn all_text(b: &Budget, c: &Call) -> Result<usize, Error> {
    Ok(c.all().iter().map(|v| text(b, Some(v))).fold(64, usize::saturating_add))
}
fn debug_rule(b: &Budget, c: &Call) -> Result<usize, Error> {
    Ok(c.value().map_or(0, |v| debug_len(v, b.bytes_left()).unwrap_or(usize::MAX)))
}
/// A list with one element per element of the value (`list`, `sort`, `unique`, `select`...).
fn elements(b: &Budget, c: &Call) -> Result<usize, Error> {
    Ok(length(b, c.value()).saturating_mul(ELEMENT_BYTES))
}
/// A pair list per element (`items`, `dictsort`, `groupby`, `zip`...).
fn pairs(b: &Budget, c: &Call) -> Result<usize, Error> {
    let n = c.all().iter().map(|v| length(b, Some(v))).fold(length(b, c.value()), usize::saturating_add);
    Ok(n.saturating_mul(4 * ELEMENT_BYTES))
}
/// `batch(n, fill)` / `slice(n, fill)`: the elements, and `n` more: `batch` reserves room for
/// a row of `n` however short the value (minijinja's `Vec::with_capacity(count)`: a count of
/// 10^9 asked for 24 GB), `slice` makes `n` lists, and fill values are up to `n`.
fn batches(b: &Budget, c: &Call) -> Result<usize, Error> {
    let n = count_arg(c.arg(1, "count"));
    Ok(length(b, c.value()).saturating_add(n).saturating_mul(3 * ELEMENT_BYTES))
}
fn tojson_rule(b: &Budget, c: &Call) -> Result<usize, Error> {
    let Some(v) = c.value() else { return Ok(0) };
    let indent = match c.arg(1, "indent") {
        None => 0,
        Some(i) => match bool::try_from(i.clone()) {
            Ok(true) => 2,
            Ok(false) => 0,
            Err(_) => usize::try_from(i).unwrap_or(0),
        },
    };
    let shape = b.shape(v, 0, Forbid::Namespace, &|| "`tojson`".to_string())?;
    // Compact JSON (each of < > & ' escaped to six bytes), plus for the pretty form at most
    // two line breaks per node, each followed by `depth x indent` spaces.
    let mut w = JsonMeasure { len: 0, special: 0, cap: b.bytes_left() };
    if serde_json::to_writer(&mut w, v).is_err() && w.len > w.cap {
        return Ok(usize::MAX);
    }
    let lines = shape.nodes.saturating_mul(2).saturating_add(2);
    let per_line = shape.depth.saturating_add(1).saturating_mul(indent).saturating_add(2);
    Ok(w.len.saturating_add(w.special.saturating_mul(5)).saturating_add(lines.saturating_mul(per_line)))
}

struct JsonMeasure {
    len: usize,
    special: usize,
    cap: usize,
}

impl std::io::Write for JsonMeasure {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.len = self.len.saturating_add(buf.len());
        self.special += buf.iter().filter(|&&c| matches!(c, b'<' | b'>' | b'&' | b'\'')).count();
        if self.len > self.cap {
            return Err(std::io::Error::other("over the budget"));
        }
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// What a call's result must satisfy: nothing (scalars, text, sub-lists of the value), or the
/// shape rules of a new list (results that nest their input one or two levels deeper).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Post {
    None,
    Shape,
}

/// The filters chat templates may use, each with its rule: every filter minijinja and
/// minijinja-contrib register (with the features packlm builds them with). Filters whose result
/// is a scalar or a value the template already held are free.
const FILTERS: &[(&str, Rule, Post)] = &[
    ("safe", times_1, Post::None),
    ("escape", times_6, Post::None),
    ("e", times_6, Post::None),
    ("lower", times_3, Post::None),
    ("upper", times_3, Post::None),
    ("title", times_3, Post::None),
    ("capitalize", times_3, Post::None),
    ("trim", times_1, Post::None),
    ("string", times_1, Post::None),
    ("striptags", times_1, Post::None),
    ("truncate", all_text, Post::None),
    ("pluralize", all_text, Post::None),
    ("filesizeformat", all_text, Post::None),
    ("pprint", debug_rule, Post::None),
    ("replace", replace_rule, Post::None),
    ("indent", indent_rule, Post::None),
    ("format", printf_rule, Post::None),
    ("tojson", tojson_rule, Post::None),
    ("join", join_rule, Post::None),
    ("split", split_rule, Post::None),
    ("lines", split_rule, Post::None),
    ("reverse", elements, Post::None),
    ("list", elements, Post::None),
    ("sort", elements, Post::None),
    ("unique", elements, Post::None),
    ("select", elements, Post::None),
    ("reject", elements, Post::None),
    ("selectattr", elements, Post::None),
    ("rejectattr", elements, Post::None),
    ("map", elements, Post::None),
    ("items", pairs, Post::Shape),
    ("dictsort", pairs, Post::Shape),
    ("groupby", pairs, Post::Shape),
    ("zip", pairs, Post::Shape),
    ("chain", pairs, Post::Shape),
    ("batch", batches, Post::Shape),
    ("slice", batches, Post::Shape),
];

/// The builtin filters by name, to wrap.
fn native_filter(name: &str) -> Option<Value> {
    use minijinja::filters as f;
    use minijinja_contrib::filters as cf;
    Some(match name {
        "safe" => Value::from_function(f::safe),
        "escape" | "e" => Value::from_function(f::escape),
        "lower" => Value::from_function(f::lower),
        "upper" => Value::from_function(f::upper),
        "title" => Value::from_function(f::title),
        "capitalize" => Value::from_function(f::capitalize),
        "trim" => Value::from_function(f::trim),
        "string" => Value::from_function(f::string),
        "striptags" => Value::from_function(cf::striptags),
        "truncate" => Value::from_function(cf::truncate),
        "pluralize" => Value::from_function(cf::pluralize),
        "filesizeformat" => Value::from_function(cf::filesizeformat),
        "pprint" => Value::from_function(f::pprint),
        "replace" => Value::from_function(f::replace),
        "indent" => Value::from_function(f::indent),
        "format" => Value::from_function(f::format),
        "tojson" => Value::from_function(f::tojson),
        "join" => Value::from_function(f::join),
        "split" => Value::from_function(f::split),
        "lines" => Value::from_function(f::lines),
        "reverse" => Value::from_function(f::reverse),
        "list" => Value::from_function(f::list),
        "sort" => Value::from_function(f::sort),
        "unique" => Value::from_function(f::unique),
        "select" => Value::from_function(f::select),
        "reject" => Value::from_function(f::reject),
        "selectattr" => Value::from_function(f::selectattr),
        "rejectattr" => Value::from_function(f::rejectattr),
        "map" => Value::from_function(f::map),
        "items" => Value::from_function(f::items),
        "dictsort" => Value::from_function(f::dictsort),
        "groupby" => Value::from_function(f::groupby),
        "zip" => Value::from_function(f::zip),
        "chain" => Value::from_function(f::chain),
        "batch" => Value::from_function(f::batch),
        "slice" => Value::from_function(f::slice),
        _ => return None,
    })
}

/// Charges `rule`'s bound for the call, runs `native`, checks the result's shape if asked.
fn guarded_call(b: &Budget, name: &'static str, rule: Rule, post: Post, native: &Value, state: &State, args: &[Value]) -> Result<Value, Error> {
    let call = Call { name, args };
    let bytes = rule(b, &call)?;
    b.charge(bytes, &|| format!("`{name}`"))?;
    let mut result = native.call(state, args)?;
    if post == Post::Shape && result.as_object().is_some() {
        // A lazy result (`chain`) becomes a list (its size was charged), which a later walk
        // can remember.
        if matches!(result.kind(), ValueKind::Iterable | ValueKind::Seq) && result.as_object().and_then(|o| o.downcast_ref::<Vec<Value>>()).is_none() {
            result = Value::from(result.try_iter()?.collect::<Vec<_>>());
        }
        b.shape(&result, 0, Forbid::Namespace, &|| format!("`{name}`"))?;
    }
    Ok(result)
}

/// String methods of minijinja-contrib's Python compatibility, with their rules.
fn method_rule(receiver: &Value, method: &str) -> Option<Rule> {
    match (receiver.kind(), method) {
        (ValueKind::String, "upper" | "lower" | "title" | "capitalize") => Some(times_3),
        (ValueKind::String, "strip" | "lstrip" | "rstrip") => Some(times_1),
        (ValueKind::String, "replace") => Some(replace_rule),
        (ValueKind::String, "split" | "splitlines") => Some(split_rule),
        (ValueKind::String, "format") => Some(str_format_rule),
        (ValueKind::String, "join") => Some(str_join_rule),
        (ValueKind::Map, "keys" | "values" | "items") => Some(pairs),
        _ => None,
    }
}

/// Replaces every filter that builds a value with its guarded form, the functions that keep
/// their arguments with checked ones, and the method fallback (Python's string and dict
/// methods) with a guarded one.
pub fn install_calls(env: &mut Environment, budget: &Arc<Budget>) {
    for &(name, rule, post) in FILTERS {
        let Some(native) = native_filter(name) else { continue };
        let b = Arc::clone(budget);
        env.add_filter(name, move |state: &State, args: Rest<Value>| guarded_call(&b, name, rule, post, &native, state, &args));
    }
    let b = Arc::clone(budget);
    env.set_unknown_method_callback(move |state: &State, value: &Value, method: &str, args: &[Value]| {
        if let Some(rule) = method_rule(value, method) {
            let mut all = Vec::with_capacity(args.len() + 1);
            all.push(value.clone());
            all.extend_from_slice(args);
            let bytes = rule(&b, &Call { name: "method", args: &all })?;
            b.charge(bytes, &|| format!("`.{method}()`"))?;
        }
        let result = minijinja_contrib::pycompat::unknown_method_callback(state, value, method, args)?;
        if matches!(method, "items" | "keys" | "values") && result.as_object().is_some() {
            b.shape(&result, 0, Forbid::Namespace, &|| format!("`.{method}()`"))?;
        }
        Ok(result)
    });
    // `dict` and `namespace` keep their arguments: no namespace in them, shape limits.
    for (name, native) in [
        ("dict", Value::from_function(minijinja::functions::dict)),
        ("namespace", Value::from_function(minijinja::functions::namespace)),
    ] {
        let b = Arc::clone(budget);
        env.add_function(name, move |state: &State, args: Rest<Value>| -> Result<Value, Error> {
            let call = Call { name, args: &args };
            for v in call.all() {
                b.check_stored(&v, &format!("`{name}()`"))?;
                if let Some(inner) = v.as_object().filter(|_| v.kind() == ValueKind::Map) {
                    for (_, item) in inner.try_iter_pairs().into_iter().flatten() {
                        if is_namespace(&item) {
                            b.check_stored(&item, &format!("`{name}()`"))?;
                        }
                    }
                }
            }
            let bytes = pairs(&b, &call)?;
            b.charge(bytes, &|| format!("`{name}()`"))?;
            native.call(state, &args)
        });
    }
    // `cycler` and `joiner` keep their arguments for the rest of the render: plain values only.
    for (name, native) in [
        ("cycler", Value::from_function(minijinja_contrib::globals::cycler)),
        ("joiner", Value::from_function(minijinja_contrib::globals::joiner)),
    ] {
        let b = Arc::clone(budget);
        env.add_function(name, move |state: &State, args: Rest<Value>| -> Result<Value, Error> {
            for v in args.iter() {
                if v.as_object().is_some() {
                    return Err(b.refuse(Status::ErrUnsupported, format!("`{name}()` takes strings and numbers in a chat template")));
                }
            }
            all_text(&b, &Call { name, args: &args }).and_then(|n| b.charge(n, &|| format!("`{name}()`")))?;
            native.call(state, &args)
        });
    }
    // `debug()` prints the whole context: not for chat templates.
    let b = Arc::clone(budget);
    env.add_function("debug", move |_args: Rest<Value>| -> Result<Value, Error> {
        Err(b.refuse(Status::ErrUnsupported, "`debug()` is not available in chat templates".to_string()))
    });
}
