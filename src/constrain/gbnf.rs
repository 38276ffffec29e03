//! GBNF, llama.cpp's grammar text, translated to llguidance's Lark-like grammar.
//!
//! The syntax read is llama.cpp's (`src/llama-grammar.cpp`): rules `name ::= alternatives`,
//! names of ASCII letters, digits and `-`; string literals `"..."` and character classes
//! `[...]` / `[^...]` with the escapes `\x..`, `\u....`, `\U........`, `\t \r \n \\ \" \[ \]
//! \-`; `.` (any character); groups; `*`, `+`, `?`, `{m}`, `{m,}`, `{m,n}`; tokens `<[id]>`,
//! `<name>` and their inverses `!<...>`; `#` comments. A newline ends a rule except inside
//! parentheses or after `|`; a rule defined twice keeps its last definition, as llama.cpp does.
//! Repetition counts: a minimum over 2,000 is refused and a maximum over 2,000 means no
//! maximum, llama.cpp's limits.
//!
//! A rule whose body refers only to such rules, with no token and no recursion, becomes a Lark
//! terminal (one lexeme, a regular language); every other rule stays a Lark rule, `root` the
//! start. Lark terminals are matched by llguidance's lexer as one lexeme each, greedy: where a
//! GBNF grammar needs a terminal to stop short of a character it could take (`[a-z]* "z"`), the
//! translation allows less than llama.cpp would, never more, so every output still parses by
//! the grammar (tests/constraint.rs checks the sample grammars that ship with llama.cpp against
//! a recognizer written from the GBNF rules).

use std::collections::HashMap;

/// Deepest nesting of parentheses read (a deeper grammar is refused, not a stack overflow).
const MAX_NESTING: usize = 64;
/// llama.cpp's MAX_REPETITION_THRESHOLD.
const MAX_REPETITION: u64 = 2000;

#[derive(Debug)]
enum Node {
    Literal(String),
    /// A character class: inclusive ranges, negated or not. `.` is the negation of nothing.
    Class { negated: bool, ranges: Vec<(u32, u32)> },
    Rule(usize),
    Token { id: u32, negated: bool },
    Seq(Vec<Node>),
    Alt(Vec<Node>),
    Repeat { node: Box<Node>, min: u64, max: Option<u64> },
}

struct Parser<'a, 'f> {
    src: &'a [u8],
    pos: usize,
    /// Rule names in order of first mention; `bodies[i]` the last definition of `names[i]`.
    names: Vec<String>,
    ids: HashMap<String, usize>,
    bodies: Vec<Option<Node>>,
    /// Where each rule was first mentioned, for an undefined rule's message.
    mentioned_at: Vec<usize>,
    special: &'f dyn Fn(&str) -> Option<u32>,
}

/// A message naming where in the grammar text it went wrong: line and column, and the text
/// there.
fn at(src: &[u8], pos: usize, what: &str) -> String {
    let pos = pos.min(src.len());
    let line = src[..pos].iter().filter(|&&b| b == b'\n').count() + 1;
    let col = pos - src[..pos].iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1) + 1;
    let rest = String::from_utf8_lossy(&src[pos..(pos + 24).min(src.len())]).into_owned();
    format!("GBNF line {line}, column {col}: {what} (at {rest:?})")
}

fn is_word(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'-'
}

impl<'a, 'f> Parser<'a, 'f> {
    fn peek(&self) -> u8 {
        self.src.get(self.pos).copied().unwrap_or(0)
    }
    fn peek_at(&self, k: usize) -> u8 {
        self.src.get(self.pos + k).copied().unwrap_or(0)
    }
    fn err(&self, what: &str) -> String {
        at(self.src, self.pos, what)
    }

    fn space(&mut self, newline_ok: bool) {
        loop {
            match self.peek() {
                b' ' | b'\t' => self.pos += 1,
                b'\r' | b'\n' if newline_ok => self.pos += 1,
                b'#' => {
                    while !matches!(self.peek(), 0 | b'\r' | b'\n') {
                        self.pos += 1;
                    }
                }
                _ => return,
            }
        }
    }

    fn name(&mut self) -> Result<String, String> {
        let start = self.pos;
        while is_word(self.peek()) {
            self.pos += 1;
        }
        if self.pos == start {
            return Err(self.err("expected a rule name"));
        }
        Ok(String::from_utf8_lossy(&self.src[start..self.pos]).into_owned())
    }

    fn int(&mut self) -> Result<u64, String> {
        let start = self.pos;
        while self.peek().is_ascii_digit() {
            self.pos += 1;
        }
        if self.pos == start {
            return Err(self.err("expected a number"));
        }
        std::str::from_utf8(&self.src[start..self.pos]).unwrap_or("").parse().map_err(|_| at(self.src, start, "the number is too large"))
    }

    fn rule_id(&mut self, name: String) -> usize {
        if let Some(&id) = self.ids.get(&name) {
            return id;
        }
        let id = self.names.len();
        self.ids.insert(name.clone(), id);
        self.names.push(name);
        self.bodies.push(None);
        self.mentioned_at.push(self.pos);
        id
    }

    fn hex(&mut self, digits: usize) -> Result<u32, String> {
        let mut v: u32 = 0;
        for _ in 0..digits {
            let d = (self.peek() as char).to_digit(16).ok_or_else(|| self.err(&format!("expected {digits} hex digits")))?;
            v = v << 4 | d;
            self.pos += 1;
        }
        Ok(v)
    }

    /// One character of a literal or class: an escape or one UTF-8 character.
    fn char(&mut self) -> Result<u32, String> {
        match self.peek() {
            0 if self.pos >= self.src.len() => Err(self.err("unexpected end of the grammar")),
            b'\\' => {
                let e = self.peek_at(1);
                self.pos += 2;
                Ok(match e {
                    b'x' => self.hex(2)?,
                    b'u' => self.hex(4)?,
                    b'U' => self.hex(8)?,
                    b't' => '\t' as u32,
                    b'r' => '\r' as u32,
                    b'n' => '\n' as u32,
                    b'\\' | b'"' | b'[' | b']' | b'-' => e as u32,
                    _ => {
                        self.pos -= 2;
                        return Err(self.err("unknown escape"));
                    }
                })
            }
            _ => {
                // The source is UTF-8 (it came from a &str), so a whole character starts here.
                let rest = std::str::from_utf8(&self.src[self.pos..]).unwrap_or("");
                let c = rest.chars().next().ok_or_else(|| self.err("not UTF-8"))?;
                self.pos += c.len_utf8();
                Ok(c as u32)
            }
        }
    }

    fn token(&mut self) -> Result<Node, String> {
        let negated = self.peek() == b'!';
        if negated {
            self.pos += 1;
        }
        if self.peek() != b'<' {
            return Err(self.err("expected '<'"));
        }
        let start = self.pos;
        self.pos += 1;
        if self.peek() == b'[' {
            self.pos += 1;
            let id = self.int()?;
            if self.peek() != b']' || self.peek_at(1) != b'>' {
                return Err(self.err("expected ']>'"));
            }
            self.pos += 2;
            let id = u32::try_from(id).map_err(|_| at(self.src, start, "the token id is too large"))?;
            return Ok(Node::Token { id, negated });
        }
        while !matches!(self.peek(), 0 | b'>') {
            self.pos += 1;
        }
        if self.peek() != b'>' {
            return Err(self.err("expected '>'"));
        }
        self.pos += 1;
        let text = String::from_utf8_lossy(&self.src[start..self.pos]).into_owned();
        let id = (self.special)(&text).ok_or_else(|| at(self.src, start, "no single token of the model has this text"))?;
        Ok(Node::Token { id, negated })
    }

    fn alternatives(&mut self, nested: bool, depth: usize) -> Result<Node, String> {
        let mut alts = vec![self.sequence(nested, depth)?];
        while self.peek() == b'|' {
            self.pos += 1;
            self.space(true);
            alts.push(self.sequence(nested, depth)?);
        }
        Ok(if alts.len() == 1 { alts.pop().unwrap_or(Node::Seq(Vec::new())) } else { Node::Alt(alts) })
    }

    fn sequence(&mut self, nested: bool, depth: usize) -> Result<Node, String> {
        let mut seq: Vec<Node> = Vec::new();
        loop {
            let c = self.peek();
            let node = match c {
                b'"' => {
                    self.pos += 1;
                    let mut s = String::new();
                    while self.peek() != b'"' {
                        let c = self.char()?;
                        s.push(char::from_u32(c).ok_or_else(|| self.err("the escape is not a Unicode character"))?);
                    }
                    self.pos += 1;
                    Node::Literal(s)
                }
                b'[' => {
                    self.pos += 1;
                    let negated = self.peek() == b'^';
                    if negated {
                        self.pos += 1;
                    }
                    let mut ranges = Vec::new();
                    while self.peek() != b']' {
                        let lo = self.char()?;
                        let mut hi = lo;
                        if self.peek() == b'-' && self.peek_at(1) != b']' {
                            self.pos += 1;
                            hi = self.char()?;
                        }
                        ranges.push((lo, hi));
                    }
                    self.pos += 1;
                    // An empty class, `[]` or `[^]`, holds no character element: llama.cpp
                    // reads it as the empty string.
                    if ranges.is_empty() {
                        Node::Literal(String::new())
                    } else {
                        Node::Class { negated, ranges }
                    }
                }
                b'<' | b'!' => self.token()?,
                b'(' => {
                    if depth >= MAX_NESTING {
                        return Err(self.err(&format!("groups nest more than {MAX_NESTING} deep")));
                    }
                    self.pos += 1;
                    self.space(true);
                    let inner = self.alternatives(true, depth + 1)?;
                    if self.peek() != b')' {
                        return Err(self.err("expected ')'"));
                    }
                    self.pos += 1;
                    inner
                }
                b'.' => {
                    self.pos += 1;
                    Node::Class { negated: true, ranges: Vec::new() }
                }
                b'*' | b'+' | b'?' | b'{' => {
                    let Some(last) = seq.pop() else {
                        return Err(self.err("a repetition with nothing before it"));
                    };
                    self.pos += 1;
                    let (min, max) = match c {
                        b'*' => (0, None),
                        b'+' => (1, None),
                        b'?' => (0, Some(1)),
                        _ => {
                            self.space(nested);
                            let min = self.int()?;
                            self.space(nested);
                            let max = match self.peek() {
                                b'}' => Some(min),
                                b',' => {
                                    self.pos += 1;
                                    self.space(nested);
                                    let max = if self.peek().is_ascii_digit() { Some(self.int()?) } else { None };
                                    self.space(nested);
                                    if self.peek() != b'}' {
                                        return Err(self.err("expected '}'"));
                                    }
                                    max
                                }
                                _ => return Err(self.err("expected ',' or '}'")),
                            };
                            self.pos += 1;
                            if min > MAX_REPETITION {
                                return Err(self.err(&format!("a repetition's minimum is over {MAX_REPETITION}")));
                            }
                            if max.is_some_and(|m| m < min) {
                                return Err(self.err("a repetition's maximum is below its minimum"));
                            }
                            (min, max.filter(|&m| m <= MAX_REPETITION))
                        }
                    };
                    Node::Repeat { node: Box::new(last), min, max }
                }
                c if is_word(c) => {
                    let name = self.name()?;
                    Node::Rule(self.rule_id(name))
                }
                _ => break,
            };
            seq.push(node);
            self.space(nested);
        }
        Ok(if seq.len() == 1 { seq.pop().unwrap_or(Node::Seq(Vec::new())) } else { Node::Seq(seq) })
    }

    fn rule(&mut self) -> Result<(), String> {
        let name = self.name()?;
        self.space(false);
        if !self.src[self.pos..].starts_with(b"::=") {
            return Err(self.err("expected '::='"));
        }
        self.pos += 3;
        self.space(true);
        let id = self.rule_id(name);
        let body = self.alternatives(false, 0)?;
        match self.peek() {
            b'\r' | b'\n' => self.pos += 1,
            _ if self.pos >= self.src.len() => {}
            _ => return Err(self.err("expected the end of the line")),
        }
        self.bodies[id] = Some(body);
        self.space(true);
        Ok(())
    }
}

/// Rust regex text for one character.
fn rx_char(c: u32) -> String {
    format!("\\x{{{c:x}}}")
}

/// The Lark text of `node`, in a terminal (`terminal`) or a rule.
fn emit(node: &Node, names: &[String], out: &mut String) {
    match node {
        Node::Literal(s) => out.push_str(&serde_json::Value::String(s.clone()).to_string()),
        Node::Class { negated, ranges } => {
            if ranges.is_empty() {
                // `.`: any character, newlines included. (`[]` and `[^]` are parsed as empty
                // literals, as llama.cpp reads them.)
                out.push_str("/(?s:.)/");
                return;
            }
            out.push_str(if *negated { "/[^" } else { "/[" });
            for &(lo, hi) in ranges {
                out.push_str(&rx_char(lo));
                if hi != lo {
                    out.push('-');
                    out.push_str(&rx_char(hi));
                }
            }
            out.push_str("]/");
        }
        Node::Rule(id) => out.push_str(&names[*id]),
        Node::Token { id, negated } => out.push_str(&format!("<[{}{id}]>", if *negated { "^" } else { "" })),
        Node::Seq(items) => {
            if items.is_empty() {
                out.push_str("\"\"");
            }
            for (i, n) in items.iter().enumerate() {
                if i > 0 {
                    out.push(' ');
                }
                let group = matches!(n, Node::Alt(_));
                if group {
                    out.push('(');
                }
                emit(n, names, out);
                if group {
                    out.push(')');
                }
            }
        }
        Node::Alt(alts) => {
            for (i, n) in alts.iter().enumerate() {
                if i > 0 {
                    out.push_str(" | ");
                }
                emit(n, names, out);
            }
        }
        Node::Repeat { node, min, max } => {
            out.push('(');
            emit(node, names, out);
            out.push(')');
            match (min, max) {
                (0, None) => out.push('*'),
                (1, None) => out.push('+'),
                (0, Some(1)) => out.push('?'),
                (m, None) => out.push_str(&format!("{{{m},}}")),
                (m, Some(n)) => out.push_str(&format!("{{{m},{n}}}")),
            }
        }
    }
}

/// Whether `node` may sit in a terminal, given which rules are terminals.
fn lexical(node: &Node, terminal: &[bool]) -> bool {
    match node {
        Node::Literal(_) | Node::Class { .. } => true,
        Node::Rule(id) => terminal[*id],
        Node::Token { .. } => false,
        Node::Seq(v) | Node::Alt(v) => v.iter().all(|n| lexical(n, terminal)),
        Node::Repeat { node, .. } => lexical(node, terminal),
    }
}

/// The Lark grammar of GBNF `text` starting at rule `root` (see the module comment).
/// `special` gives the id of the one token a `<name>` names. Err: a message naming the line
/// and column of what is wrong.
pub fn to_lark(text: &str, root: &str, special: &dyn Fn(&str) -> Option<u32>) -> Result<String, String> {
    let mut p = Parser { src: text.as_bytes(), pos: 0, names: Vec::new(), ids: HashMap::new(), bodies: Vec::new(), mentioned_at: Vec::new(), special };
    p.space(true);
    while p.pos < p.src.len() {
        p.rule()?;
    }
    let Some(&root) = p.ids.get(root) else {
        return Err(format!("GBNF: the grammar has no rule named {root:?}"));
    };
    let mut bodies = Vec::with_capacity(p.bodies.len());
    for (i, b) in p.bodies.into_iter().enumerate() {
        bodies.push(b.ok_or_else(|| at(p.src, p.mentioned_at[i], &format!("rule {:?} is used but never defined", p.names[i])))?);
    }
    // Terminals: rules whose bodies hold only characters and other terminals, found until
    // nothing changes (a recursive rule never qualifies). root stays a rule: it is the start.
    let mut terminal = vec![false; bodies.len()];
    loop {
        let mut changed = false;
        for i in 0..bodies.len() {
            if i != root && !terminal[i] && lexical(&bodies[i], &terminal) {
                terminal[i] = true;
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    // Names of Lark's kinds, unique by number whatever GBNF's names were (`a-b` and `A-B` are
    // two GBNF rules).
    let names: Vec<String> = p
        .names
        .iter()
        .enumerate()
        .map(|(i, n)| match (i == root, terminal[i]) {
            (true, _) => "start".to_string(),
            (false, true) => format!("T{i}_{}", n.to_ascii_uppercase()),
            (false, false) => format!("r{i}_{}", n.to_ascii_lowercase()),
        })
        .collect();
    let mut out = String::from("%llguidance {}\n");
    for (i, body) in bodies.iter().enumerate() {
        out.push_str(&names[i]);
        out.push_str(": ");
        emit(body, &names, &mut out);
        out.push('\n');
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lark(g: &str) -> String {
        to_lark(g, "root", &|_| None).unwrap()
    }

    #[test]
    fn rules_become_terminals_only_when_regular() {
        let l = lark("root ::= item+ \"!\"\nitem ::= [a-c] digit?  # a comment\ndigit ::= [0-9]\nlist ::= \"(\" list? \")\"\n");
        assert!(l.contains("start: (r1_item)+ \"!\"") || l.contains("start: (T1_ITEM)+ \"!\""), "{l}");
        assert!(l.contains("T1_ITEM: /[\\x{61}-\\x{63}]/ (T2_DIGIT)?"), "{l}");
        assert!(l.contains("r3_list: \"(\" (r3_list)? \")\""), "{l}");
    }

    #[test]
    fn escapes_and_classes() {
        let l = lark("root ::= \"\\x41\\u00e9\\n\\\"\" [^\\]\\-a] . \"\"");
        assert!(l.contains(r#"start: "Aé\n\"" /[^\x{5d}\x{2d}\x{61}]/ /(?s:.)/ """#), "{l}");
    }

    #[test]
    fn repetitions_and_groups() {
        let l = lark("root ::= (\"a\" | \"b\"\n  | \"c\"){2} \"d\"{1,3} \"e\"{2,} \"f\"{3,5000}");
        assert!(l.contains(r#"start: ("a" | "b" | "c"){2,2} ("d"){1,3} ("e"){2,} ("f"){3,}"#), "{l}");
    }

    #[test]
    fn bad_grammars_name_the_place() {
        for (g, want) in [
            ("root ::= foo", "never defined"),
            ("item ::= \"a\"", "no rule named \"root\""),
            ("root ::= \"a\" \\", "line 1"),
            ("root ::= \"abc", "end of the grammar"),
            ("root ::= [a-", "end of the grammar"),
            ("root ::= \"\\q\"", "unknown escape"),
            ("root ::= \"a\"{3000}", "over 2000"),
            ("root ::= \"a\"{3,2}", "below its minimum"),
            ("root ::= *", "nothing before it"),
            ("root ::= <tok>", "no single token"),
            ("root = \"a\"", "'::='"),
        ] {
            let e = to_lark(g, "root", &|_| None).unwrap_err();
            assert!(e.contains(want), "{g:?}: {e}");
        }
        let deep = format!("root ::= {}\"a\"{}", "(".repeat(200), ")".repeat(200));
        assert!(to_lark(&deep, "root", &|_| None).unwrap_err().contains("nest"));
    }

    #[test]
    fn tokens_by_id_and_name() {
        let l = to_lark("root ::= <[12]> !<[7]> <|end|>", "root", &|s| (s == "<|end|>").then_some(3)).unwrap();
        assert!(l.contains("start: <[12]> <[^7]> <[3]>"), "{l}");
    }

    #[test]
    fn any_rule_may_be_the_start() {
        let l = to_lark("root ::= item item\nitem ::= \"a\" | \"b\"\n", "item", &|_| None).unwrap();
        assert!(l.contains("r0_root: start start") && l.contains("start: \"a\" | \"b\""), "{l}");
    }
}
