//! An independent recognizer for llama.cpp's GBNF grammars, the oracle of the grammar tests.
//!
//! Written from llama.cpp's grammars/README.md and the parser in its src/llama-grammar.cpp
//! (`llama_grammar_parser::parse` and the functions it calls; the copy vendored in the
//! llama-cpp-python 0.3.36 sdist), sharing no code with packlm's src/. The syntax follows that
//! parser to the character, quirks included (below); the grammar is then desugared to a plain
//! context-free grammar whose terminals are sets of codepoints, and a string is recognized with
//! Earley's algorithm, nullable rules handled as Aycock & Horspool do ("Practical Earley
//! Parsing", 2002): predicting a nullable nonterminal also steps over it.
//!
//! Quirks of llama.cpp's parser kept here, so this answers what llama.cpp would:
//! - a rule defined twice keeps its last definition (`add_rule` overwrites);
//! - an empty class `[]` or `[^]` adds no symbol, so it matches the empty string;
//! - `{m,n}` with n above 2000 (MAX_REPETITION_THRESHOLD) means `{m,}`; m above 2000, or
//!   nested repetitions whose product passes 2000, are refused;
//! - outside parentheses a newline ends the rule unless it follows `|`.
//!
//! Not kept: tokens (`<think>`, `<[id]>`, `!<...>`) are refused, having no meaning without a
//! vocabulary; left recursion, which llama.cpp refuses at grammar init (not at parse), is
//! accepted here (Earley recognizes it); a `{m,n}` with n < m, which llama.cpp never finishes
//! expanding, is refused.
#![allow(dead_code)]

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;

/// llama-grammar.cpp's MAX_REPETITION_THRESHOLD.
const MAX_REPETITION: u64 = 2000;

/// A terminal: one codepoint inside (or, negated, outside) a union of inclusive ranges. `.` is
/// the negation of no ranges.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct CharSet {
    negated: bool,
    ranges: Vec<(u32, u32)>,
}

impl CharSet {
    fn matches(&self, c: u32) -> bool {
        self.ranges.iter().any(|&(lo, hi)| lo <= c && c <= hi) != self.negated
    }

    /// Whether no Unicode scalar value (what a `&str` holds) matches: `[z-a]`, or `[^\x00-\U0010FFFF]`.
    fn is_empty(&self) -> bool {
        let scalar_in = |lo: u32, hi: u32| lo <= hi && lo <= 0x10FFFF && !(lo >= 0xD800 && hi.min(0x10FFFF) <= 0xDFFF);
        if !self.negated {
            return !self.ranges.iter().any(|&(lo, hi)| scalar_in(lo, hi));
        }
        // Walk the gaps the ranges leave in 0..=0x10FFFF; a gap holding a scalar matches.
        let mut ranges: Vec<(u32, u32)> = self.ranges.iter().copied().filter(|&(lo, hi)| lo <= hi).collect();
        ranges.sort_unstable();
        let mut next = 0u32;
        for (lo, hi) in ranges {
            if lo > next && scalar_in(next, lo - 1) {
                return false;
            }
            next = next.max(hi.saturating_add(1));
        }
        !scalar_in(next, 0x10FFFF)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Sym {
    /// An index into `terminals`.
    Char(u32),
    /// A nonterminal.
    Rule(u32),
}

/// An Earley item: (production, dot, origin set).
type Item = (u32, u32, u32);

/// A parsed grammar, desugared to productions over codepoint sets.
pub struct Gbnf {
    terminals: Vec<CharSet>,
    /// (left-hand nonterminal, right-hand side) of each production, only those whose every
    /// symbol derives some string; the start production `S' ::= root` is `start`.
    prods: Vec<(u32, Vec<Sym>)>,
    /// The productions of each nonterminal.
    by_lhs: Vec<Vec<u32>>,
    nullable: Vec<bool>,
    start: Option<u32>,
}

impl Gbnf {
    /// Parses GBNF text; Err with a message on bad syntax, an undefined rule, or no `root`.
    pub fn parse(text: &str) -> Result<Gbnf, String> {
        let mut p = Parser::new(text);
        p.grammar()?;
        let root = *p.ids.get("root").ok_or("the grammar has no rule 'root'")?;
        let mut alts = Vec::with_capacity(p.alts.len() + 1);
        for (id, a) in p.alts.into_iter().enumerate() {
            alts.push(a.ok_or_else(|| format!("undefined rule '{}'", p.names[id]))?);
        }
        alts.push(vec![vec![Sym::Rule(root as u32)]]);
        Ok(Gbnf::build(p.terminals, alts))
    }

    /// Whether `s` (whole) is derived from `root`.
    pub fn accepts(&self, s: &str) -> bool {
        let n = s.chars().count() as u32;
        match (self.recognize(s), self.start) {
            (Some(sets), Some(start)) => sets[n as usize].contains(&(start, 1, 0)),
            _ => false,
        }
    }

    /// Whether `s` is a prefix of some string derived from `root` (a viable prefix). Exact
    /// because every production left holds only symbols that derive some string.
    pub fn accepts_prefix(&self, s: &str) -> bool {
        self.start.is_some() && self.recognize(s).is_some()
    }

    fn build(terminals: Vec<CharSet>, alts: Vec<Vec<Vec<Sym>>>) -> Gbnf {
        let start = alts.len() - 1;
        // Productive nonterminals (derive some string), to a fixed point; then only the
        // productions made of productive symbols are kept, so every Earley item can finish.
        let mut productive = vec![false; alts.len()];
        let symbol_productive = |s: &Sym, productive: &[bool]| match *s {
            Sym::Char(t) => !terminals[t as usize].is_empty(),
            Sym::Rule(r) => productive[r as usize],
        };
        loop {
            let mut changed = false;
            for (a, rhss) in alts.iter().enumerate() {
                if !productive[a] && rhss.iter().any(|rhs| rhs.iter().all(|s| symbol_productive(s, &productive))) {
                    productive[a] = true;
                    changed = true;
                }
            }
            if !changed {
                break;
            }
        }
        let mut prods = Vec::new();
        let mut by_lhs = vec![Vec::new(); alts.len()];
        for (a, rhss) in alts.into_iter().enumerate() {
            for rhs in rhss {
                if rhs.iter().all(|s| symbol_productive(s, &productive)) {
                    by_lhs[a].push(prods.len() as u32);
                    prods.push((a as u32, rhs));
                }
            }
        }
        let mut nullable = vec![false; by_lhs.len()];
        loop {
            let mut changed = false;
            for (a, rhs) in &prods {
                if !nullable[*a as usize] && rhs.iter().all(|s| matches!(*s, Sym::Rule(r) if nullable[r as usize])) {
                    nullable[*a as usize] = true;
                    changed = true;
                }
            }
            if !changed {
                break;
            }
        }
        let start_prod = by_lhs[start].first().copied();
        Gbnf { terminals, prods, by_lhs, nullable, start: start_prod }
    }

    /// The Earley sets of `s`, or None where some set is empty (`s` is no viable prefix).
    fn recognize(&self, s: &str) -> Option<Vec<HashSet<Item>>> {
        let input: Vec<u32> = s.chars().map(u32::from).collect();
        let n = input.len();
        let mut sets: Vec<Vec<Item>> = vec![Vec::new(); n + 1];
        let mut seen: Vec<HashSet<Item>> = vec![HashSet::new(); n + 1];
        // Per set, the items whose next symbol is a given nonterminal (for completion).
        let mut waiting: Vec<HashMap<u32, Vec<Item>>> = vec![HashMap::new(); n + 1];
        let mut add = |sets: &mut Vec<Vec<Item>>, j: usize, item: Item| {
            if seen[j].insert(item) {
                sets[j].push(item);
            }
        };
        if let Some(start) = self.start {
            add(&mut sets, 0, (start, 0, 0));
        }
        for j in 0..=n {
            if sets[j].is_empty() {
                return None;
            }
            let mut predicted = HashSet::new();
            let mut k = 0;
            while k < sets[j].len() {
                let item @ (p, d, o) = sets[j][k];
                k += 1;
                let (lhs, rhs) = &self.prods[p as usize];
                match rhs.get(d as usize) {
                    Some(&Sym::Rule(b)) => {
                        waiting[j].entry(b).or_default().push(item);
                        if predicted.insert(b) {
                            for &q in &self.by_lhs[b as usize] {
                                add(&mut sets, j, (q, 0, j as u32));
                            }
                        }
                        if self.nullable[b as usize] {
                            add(&mut sets, j, (p, d + 1, o));
                        }
                    }
                    Some(&Sym::Char(t)) => {
                        if j < n && self.terminals[t as usize].matches(input[j]) {
                            add(&mut sets, j + 1, (p, d + 1, o));
                        }
                    }
                    None => {
                        let parents: Vec<Item> = waiting[o as usize].get(lhs).map_or(Vec::new(), |v| v.clone());
                        for (p2, d2, o2) in parents {
                            add(&mut sets, j, (p2, d2 + 1, o2));
                        }
                    }
                }
            }
        }
        Some(seen)
    }
}

/// llama-grammar.cpp's parser over the text's chars, building alternatives per nonterminal.
struct Parser {
    src: Vec<char>,
    pos: usize,
    /// Named rules' nonterminals.
    ids: HashMap<String, usize>,
    /// Each nonterminal's name (generated ones: `<rule>_<n>`), for messages.
    names: Vec<String>,
    /// Each nonterminal's alternatives; None until defined.
    alts: Vec<Option<Vec<Vec<Sym>>>>,
    terminals: Vec<CharSet>,
    terminal_ids: HashMap<CharSet, u32>,
    /// What llama.cpp's `symbol_ids.size()` would be, for its repetition limit (it counts
    /// named rules when first seen, groups, and the rules a repetition generates).
    llama_symbols: u64,
}

impl Parser {
    fn new(text: &str) -> Parser {
        Parser {
            src: text.chars().collect(),
            pos: 0,
            ids: HashMap::new(),
            names: Vec::new(),
            alts: Vec::new(),
            terminals: Vec::new(),
            terminal_ids: HashMap::new(),
            llama_symbols: 0,
        }
    }

    /// The char `k` ahead, '\0' past the end (the parser reads a C string).
    fn at(&self, k: usize) -> char {
        self.src.get(self.pos + k).copied().unwrap_or('\0')
    }

    fn err<T>(&self, what: &str) -> Result<T, String> {
        let before = &self.src[..self.pos.min(self.src.len())];
        let line = before.iter().filter(|&&c| c == '\n').count() + 1;
        let col = before.iter().rev().take_while(|&&c| c != '\n').count() + 1;
        let rest: String = self.src[self.pos.min(self.src.len())..].iter().take(20).collect();
        Err(format!("{what} at line {line}, column {col} ({rest:?})"))
    }

    /// `parse_space`: blanks and `#` comments, and newlines where `newline_ok`.
    fn space(&mut self, newline_ok: bool) {
        loop {
            match self.at(0) {
                ' ' | '\t' => self.pos += 1,
                '\r' | '\n' if newline_ok => self.pos += 1,
                '#' => {
                    while !matches!(self.at(0), '\0' | '\r' | '\n') {
                        self.pos += 1;
                    }
                }
                _ => return,
            }
        }
    }

    fn is_word_char(c: char) -> bool {
        c.is_ascii_alphanumeric() || c == '-'
    }

    fn name(&mut self) -> Result<String, String> {
        let start = self.pos;
        while Self::is_word_char(self.at(0)) {
            self.pos += 1;
        }
        if self.pos == start {
            return self.err("expecting name");
        }
        Ok(self.src[start..self.pos].iter().collect())
    }

    fn int(&mut self) -> Result<u64, String> {
        let start = self.pos;
        while self.at(0).is_ascii_digit() {
            self.pos += 1;
        }
        if self.pos == start {
            return self.err("expecting an int");
        }
        let digits: String = self.src[start..self.pos].iter().collect();
        digits.parse().or_else(|_| self.err("integer out of range"))
    }

    /// `parse_char`: one codepoint, or an escape (`\x41`, `\u00e9`, `\U0001F600`, `\t`, `\r`,
    /// `\n`, and `\\ \" \[ \] \-` for themselves).
    fn char_(&mut self) -> Result<u32, String> {
        match (self.at(0), self.at(1)) {
            ('\0', _) => self.err("unexpected end of input"),
            ('\\', e) => {
                let digits = match e {
                    'x' => 2,
                    'u' => 4,
                    'U' => 8,
                    't' | 'r' | 'n' | '\\' | '"' | '[' | ']' | '-' => {
                        self.pos += 2;
                        return Ok(match e {
                            't' => '\t',
                            'r' => '\r',
                            'n' => '\n',
                            c => c,
                        } as u32);
                    }
                    _ => return self.err("unknown escape"),
                };
                self.pos += 2;
                let mut value = 0u32;
                for _ in 0..digits {
                    match self.at(0).to_digit(16) {
                        Some(d) => value = value << 4 | d,
                        None => return self.err(&format!("expecting {digits} hex chars")),
                    }
                    self.pos += 1;
                }
                Ok(value)
            }
            (c, _) => {
                self.pos += 1;
                Ok(c as u32)
            }
        }
    }

    /// The nonterminal of a named rule, made when first seen.
    fn rule_id(&mut self, name: &str) -> usize {
        if let Some(&id) = self.ids.get(name) {
            return id;
        }
        self.llama_symbols += 1;
        let id = self.nonterminal(name.to_string());
        self.ids.insert(name.to_string(), id);
        id
    }

    fn nonterminal(&mut self, name: String) -> usize {
        self.names.push(name);
        self.alts.push(None);
        self.alts.len() - 1
    }

    /// A generated nonterminal with the given alternatives.
    fn fresh(&mut self, base: &str, alts: Vec<Vec<Sym>>) -> u32 {
        let id = self.nonterminal(format!("{base}_{}", self.names.len()));
        self.alts[id] = Some(alts);
        id as u32
    }

    fn terminal(&mut self, set: CharSet) -> Sym {
        let next = self.terminals.len() as u32;
        let id = *self.terminal_ids.entry(set.clone()).or_insert(next);
        if id == next {
            self.terminals.push(set);
        }
        Sym::Char(id)
    }

    /// `parse`: rules until the end.
    fn grammar(&mut self) -> Result<(), String> {
        self.space(true);
        while self.at(0) != '\0' {
            self.rule()?;
        }
        Ok(())
    }

    /// `parse_rule`: `name ::= alternates`, then a newline or the end.
    fn rule(&mut self) -> Result<(), String> {
        let name = self.name()?;
        self.space(false);
        let id = self.rule_id(&name);
        if !(self.at(0) == ':' && self.at(1) == ':' && self.at(2) == '=') {
            return self.err("expecting ::=");
        }
        self.pos += 3;
        self.space(true);
        let alts = self.alternates(&name, false)?;
        self.alts[id] = Some(alts);
        match self.at(0) {
            '\r' => self.pos += if self.at(1) == '\n' { 2 } else { 1 },
            '\n' => self.pos += 1,
            '\0' => {}
            _ => return self.err("expecting newline or end"),
        }
        self.space(true);
        Ok(())
    }

    /// `parse_alternates`: sequences separated by `|` (a newline may follow `|`).
    fn alternates(&mut self, rule_name: &str, nested: bool) -> Result<Vec<Vec<Sym>>, String> {
        let mut alts = vec![self.sequence(rule_name, nested)?];
        while self.at(0) == '|' {
            self.pos += 1;
            self.space(true);
            alts.push(self.sequence(rule_name, nested)?);
        }
        Ok(alts)
    }

    /// `parse_sequence`. Each element is kept apart in `items` (a literal string is one element
    /// of several chars) since `*`, `+`, `?` and `{..}` apply to the last element whole.
    fn sequence(&mut self, rule_name: &str, nested: bool) -> Result<Vec<Sym>, String> {
        let mut items: Vec<Vec<Sym>> = Vec::new();
        // llama.cpp's n_prev_rules: how many rules the last element stands for.
        let mut n_prev_rules = 1u64;
        loop {
            match self.at(0) {
                '"' => {
                    self.pos += 1;
                    let mut item = Vec::new();
                    while self.at(0) != '"' {
                        let c = self.char_()?;
                        item.push(self.terminal(CharSet { negated: false, ranges: vec![(c, c)] }));
                    }
                    self.pos += 1;
                    self.space(nested);
                    items.push(item);
                    n_prev_rules = 1;
                }
                '[' => {
                    self.pos += 1;
                    let negated = self.at(0) == '^';
                    if negated {
                        self.pos += 1;
                    }
                    let mut ranges = Vec::new();
                    while self.at(0) != ']' {
                        let lo = self.char_()?;
                        let mut hi = lo;
                        if self.at(0) == '-' && self.at(1) != ']' {
                            self.pos += 1;
                            hi = self.char_()?;
                        }
                        ranges.push((lo, hi));
                    }
                    self.pos += 1;
                    self.space(nested);
                    // An empty class adds no symbol in llama.cpp: it matches the empty string.
                    items.push(if ranges.is_empty() { Vec::new() } else { vec![self.terminal(CharSet { negated, ranges })] });
                    n_prev_rules = 1;
                }
                '<' | '!' => return self.err("tokens (<...>) are not supported"),
                '.' => {
                    self.pos += 1;
                    self.space(nested);
                    items.push(vec![self.terminal(CharSet { negated: true, ranges: Vec::new() })]);
                    n_prev_rules = 1;
                }
                '(' => {
                    self.pos += 1;
                    self.space(true);
                    let before = self.llama_symbols;
                    self.llama_symbols += 1;
                    let alts = self.alternates(rule_name, true)?;
                    n_prev_rules = (self.llama_symbols - before).max(1);
                    let group = self.fresh(rule_name, alts);
                    if self.at(0) != ')' {
                        return self.err("expecting ')'");
                    }
                    self.pos += 1;
                    self.space(nested);
                    items.push(vec![Sym::Rule(group)]);
                }
                '*' | '+' | '?' => {
                    let (min, max) = match self.at(0) {
                        '*' => (0, None),
                        '+' => (1, None),
                        _ => (0, Some(1)),
                    };
                    self.pos += 1;
                    self.space(nested);
                    self.repeat(rule_name, &mut items, &mut n_prev_rules, min, max)?;
                }
                '{' => {
                    self.pos += 1;
                    self.space(nested);
                    let min = self.int()?;
                    self.space(nested);
                    let max = match self.at(0) {
                        '}' => Some(min),
                        ',' => {
                            self.pos += 1;
                            self.space(nested);
                            let max = if self.at(0).is_ascii_digit() { Some(self.int()?) } else { None };
                            self.space(nested);
                            if self.at(0) != '}' {
                                return self.err("expecting '}'");
                            }
                            max
                        }
                        _ => return self.err("expecting ','"),
                    };
                    self.pos += 1;
                    self.space(nested);
                    if min > MAX_REPETITION {
                        return self.err("number of repetitions exceeds sane defaults");
                    }
                    // llama.cpp reads an upper bound above the threshold as none.
                    let max = max.filter(|&m| m <= MAX_REPETITION);
                    self.repeat(rule_name, &mut items, &mut n_prev_rules, min, max)?;
                }
                c if Self::is_word_char(c) => {
                    let name = self.name()?;
                    self.space(nested);
                    let id = self.rule_id(&name);
                    items.push(vec![Sym::Rule(id as u32)]);
                    n_prev_rules = 1;
                }
                _ => return Ok(items.concat()),
            }
        }
    }

    /// `handle_repetitions`: the last element `S` becomes `S` min times, then (no max) `R` with
    /// `R ::= R S |` (left recursive: Earley's cheap direction), or (max) `R(max-min)` with
    /// `R(1) ::= S |` and `R(k) ::= S R(k-1) |`. The language is llama.cpp's; the rules differ.
    fn repeat(&mut self, rule_name: &str, items: &mut [Vec<Sym>], n_prev_rules: &mut u64, min: u64, max: Option<u64>) -> Result<(), String> {
        let last = match items.last() {
            Some(last) if !last.is_empty() => last.clone(),
            _ => return self.err("expecting preceding item to */+/?/{"),
        };
        if max.is_some_and(|m| m < min) {
            return self.err("repetition {m,n} with n < m");
        }
        let total_rules = match max {
            Some(m) if m > 0 => m,
            _ => min.max(1),
        };
        if n_prev_rules.saturating_mul(total_rules) > MAX_REPETITION {
            return self.err("number of rules that are going to be repeated multiplied by the new repetition exceeds sane defaults");
        }
        *n_prev_rules *= total_rules;
        let n_opt = max.map_or(1, |m| m - min);
        self.llama_symbols += n_opt;
        let s = if last.len() == 1 { last[0] } else { Sym::Rule(self.fresh(rule_name, vec![last])) };
        let mut expanded = vec![s; min as usize];
        match max {
            None => {
                let r = self.nonterminal(format!("{rule_name}_{}", self.names.len()));
                self.alts[r] = Some(vec![vec![Sym::Rule(r as u32), s], Vec::new()]);
                expanded.push(Sym::Rule(r as u32));
            }
            Some(m) if m > min => {
                let mut r = self.fresh(rule_name, vec![vec![s], Vec::new()]);
                for _ in 1..m - min {
                    r = self.fresh(rule_name, vec![vec![s, Sym::Rule(r)], Vec::new()]);
                }
                expanded.push(Sym::Rule(r));
            }
            Some(_) => {}
        }
        *items.last_mut().expect("checked above") = expanded;
        Ok(())
    }
}

/// The sample grammars' folder in the sdist, or None (with a note) when fetch.sh has not run
/// and PACKLM_REQUIRE_MODELS is unset. The cache is found as fetch.sh finds it.
pub fn samples() -> Option<PathBuf> {
    let env = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty()).map(PathBuf::from);
    let cache = env("PACKLM_CACHE")
        .or_else(|| env("XDG_CACHE_HOME").map(|p| p.join("packlm")))
        .or_else(|| env("HOME").map(|p| p.join(".cache/packlm")))?;
    super::fetched(cache.join("llama_cpp_python-0.3.36/vendor/llama.cpp/grammars"), "tests/llama/fetch.sh")
}
