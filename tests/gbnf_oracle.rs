//! The GBNF oracle (tests/common/gbnf.rs) against hand-checked strings: llama.cpp's 8 sample
//! grammars (from the llama-cpp-python 0.3.36 sdist that tests/llama/fetch.sh unpacks), and
//! small inline grammars, one per syntax feature. Each expected answer was worked out by hand
//! from the grammar text quoted beside it, so a wrong answer is the oracle's fault.

mod common;

use common::gbnf::{samples, Gbnf};

fn sample(file: &str) -> Option<Gbnf> {
    let path = samples()?.join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    Some(Gbnf::parse(&text).unwrap_or_else(|e| panic!("{file}: {e}")))
}

fn grammar(text: &str) -> Gbnf {
    Gbnf::parse(text).unwrap_or_else(|e| panic!("{text:?}: {e}"))
}

/// `yes` are in the language, `no` are not.
fn check(g: &Gbnf, what: &str, yes: &[&str], no: &[&str]) {
    for s in yes {
        assert!(g.accepts(s), "{what}: should accept {s:?}");
        assert!(g.accepts_prefix(s), "{what}: a sentence {s:?} is a viable prefix");
    }
    for s in no {
        assert!(!g.accepts(s), "{what}: should reject {s:?}");
    }
}

/// `yes` are viable prefixes, `no` are not.
fn check_prefix(g: &Gbnf, what: &str, yes: &[&str], no: &[&str]) {
    for s in yes {
        assert!(g.accepts_prefix(s), "{what}: {s:?} should be a viable prefix");
    }
    for s in no {
        assert!(!g.accepts_prefix(s), "{what}: {s:?} should be no viable prefix");
        assert!(!g.accepts(s), "{what}: {s:?} is no prefix, so no sentence");
    }
}

fn refused(text: &str, why: &str) {
    assert!(Gbnf::parse(text).is_err(), "{why}: {text:?} should not parse");
}

#[test]
fn json() {
    let Some(g) = sample("json.gbnf") else { return };
    check(
        &g,
        "json.gbnf",
        &[
            r#"{"a": [1, 2.5e3, "x"]}"#,
            "{}",
            r#"{"k": {"n": null, "t": true, "f": false}, "e": []}"#,
            r#"{"s": "q\"b\\s\nu\u00e9 é"}"#,
            r#"{"a":-0.5}"#,
            "{\n  \"a\": 1\n}",
            "{} ", // object ::= ... "}" ws
            // exponent: [eE] [-+]? [0-9] [1-9]{0,15}
            r#"{"a": 1E-9}"#,
        ],
        &[
            r#"{"a" 1}"#,
            "[1, 2]", // root ::= object
            r#"{"a": 01}"#,
            r#"{"a": 1e10}"#, // no 0 after the exponent's first digit
            r#"{"a": 1,}"#,
            r#"{"a": "x}"#,
            r#"{"a":  1}"#, // ws is at most one space
            r#"{"a": "\x"}"#,
            "{\"a\": \"tab\there\"}", // a raw control char in a string
            "",
        ],
    );
    check_prefix(&g, "json.gbnf", &["", "{", r#"{"a"#, r#"{"a": [1, "#, "{\n"], &["}", r#"{"a": [1, ]"#, "{}}", r#"{"a":  "#]);
}

#[test]
fn json_arr() {
    let Some(g) = sample("json_arr.gbnf") else { return };
    // arr ::= "[\n" ws (value (",\n" ws value)*)? "]", and the exponent is [1-9] [0-9]{0,15}.
    check(&g, "json_arr.gbnf", &["[\n]", "[\n{\"a\": 1},\n2]", "[\n1e10]", "[\n [1, 2] ,\n\"x\" ]"], &["[1]", "[\n1]\n", "[\n1e0]", "[\n1,2]", "[]"]);
    check_prefix(&g, "json_arr.gbnf", &["[", "[\n{", "[\n1,\n"], &["[1", "[\n1]\n"]);
}

#[test]
fn list() {
    let Some(g) = sample("list.gbnf") else { return };
    // item ::= "- " [^\r\n\x0b\x0c\x85\u2028\u2029]+ "\n"
    check(&g, "list.gbnf", &["- one\n", "- one\n- two words, é\n"], &["", "- \n", "- a", "-a\n", "- a\u{2028}b\n", "- a\rb\n", "- a\u{85}\n"]);
    check_prefix(&g, "list.gbnf", &["- a", "- a\n-"], &["- a\u{c}", "x"]);
}

#[test]
fn arithmetic() {
    let Some(g) = sample("arithmetic.gbnf") else { return };
    // A term starts with no blank: ws follows idents, numbers and ")" only.
    check(
        &g,
        "arithmetic.gbnf",
        &["1+2*3=7\n", "x1_y=10\n(a +b) *2 = c\n", "1=\n2\n", "((x))/y-3=z\n", "1=2\n\n"],
        &["1+2*3=7", "1 + 2=3\n", "=3\n", "A=1\n", "1=2+3\n", ""],
    );
    check_prefix(&g, "arithmetic.gbnf", &["(a +", "1=2\n3"], &["+", "1=2+"]);
}

#[test]
fn chess() {
    let Some(g) = sample("chess.gbnf") else { return };
    check(
        &g,
        "chess.gbnf",
        &["1. e4 e5\n2. Nf3 Nc6\n3. Bb5 a6\n", "1. d4 d5\n2. c4 dxc4\n10. O-O-O Qxd8#\n", "1. e4 d5\n2. exd5 Qxd5\n99. e8=Q+ Kb1\n"],
        &["1. e4 e5\n", "1. e9 e5\n2. d4 d5\n", "1. e4 e5\n0. d4 d5\n", "1. e4 e5\n2. O-O-O-O d5\n", "1. e4 e5\n100. d4 d5\n", "1. e4 e5\n2. Pe4 d5\n"],
    );
    check_prefix(&g, "chess.gbnf", &["1. e4 e5\n2. N", "1. O-O"], &["2. e4", "1. e4 e5\n2. Z"]);
}

#[test]
fn c() {
    let Some(g) = sample("c.gbnf") else { return };
    // ws ::= ([ \t\n]+) is required where it appears: after a type, around "=" in
    // assignments, after "return", inside a parenExpression's parentheses, and between a called
    // statement's name and "(".
    // ("return (x);" would pass: "return" is also an identifier, so it reads as a call.)
    let main = "int main(){int y = 2*( 3+x );while(y>0){y = y-1;}if(y==0){print (y);}else{}// done\n/* c * d */}";
    let for_loop = "float g(){for(int i = 0; i<10; i = i+1){}return -f(2);}";
    let both = format!("int f(int x){{return x;}}{main}{for_loop}");
    check(&g, "c.gbnf", &["", "int f(int x){return x;}", main, for_loop, &both], &["int f(int x) {return x;}", "int f(int x){return x}", "int f(int x){y=1;}", "double f(){}", "int f(){return 1.5;}", "int f(){print(y);}", "int f(){return -(x);}"]);
    check_prefix(&g, "c.gbnf", &["int f(", "int main(){/* x"], &["int(", "intf", "int f() "]);
}

#[test]
fn english() {
    let Some(g) = sample("english.gbnf") else { return };
    // punctuation ::= [!"#$%&'()*+,-./:;<=>?@[\\\]^_`{|}~] holds ",-." as a range.
    check(&g, "english.gbnf", &["Hello, world! It's 2024.", "a\tb\nc", "[x]\\y^{z}~-"], &["Hello  world", "héllo", " lead", "trailing ", ""]);
    check_prefix(&g, "english.gbnf", &["Hello ", ""], &["Hello  ", " "]);
}

#[test]
fn japanese() {
    let Some(g) = sample("japanese.gbnf") else { return };
    // hiragana [ぁ-ゟ], katakana [ァ-ヿ], punctuation [、-〾], cjk [一-鿿]
    check(&g, "japanese.gbnf", &["これはテストです。", "日本語 テスト", "コーヒー、ください"], &["hello", "これは test", "日本語。 ", "すごい！"]);
    check_prefix(&g, "japanese.gbnf", &["日本 "], &["日本  ", "a"]);
}

#[test]
fn every_sample_parses() {
    let Some(dir) = samples() else { return };
    for file in ["json.gbnf", "json_arr.gbnf", "list.gbnf", "arithmetic.gbnf", "c.gbnf", "chess.gbnf", "english.gbnf", "japanese.gbnf"] {
        let text = std::fs::read_to_string(dir.join(file)).unwrap();
        Gbnf::parse(&text).unwrap_or_else(|e| panic!("{file}: {e}"));
    }
}

#[test]
fn long_json_is_quick() {
    let Some(g) = sample("json.gbnf") else { return };
    let items: Vec<String> = (0..100).map(|i| format!("{i}.5")).collect();
    let doc = format!("{{\"xs\": [{}], \"s\": \"{}\"}}", items.join(", "), "ab".repeat(40));
    assert!(doc.chars().count() > 500);
    let t = std::time::Instant::now();
    assert!(g.accepts(&doc));
    assert!(!g.accepts(&doc.replace("7.5", "7.")));
    assert!(t.elapsed().as_secs_f64() < 5.0, "{:?} for two checks", t.elapsed());
}

#[test]
fn escapes() {
    let g = grammar(r#"root ::= "\x41" "\u00e9" "\n" "\t" "\r" "\\" "\"" [\]] [\-] [\[] "\U0001F600" "日""#);
    check(&g, "escapes", &["Aé\n\t\r\\\"]-[😀日"], &["Aé\\n\t\r\\\"]-[😀日", "\\x41é\n\t\r\\\"]-[😀日"]);
    check(&grammar(r#"root ::= [\x00-\x1F]"#), "hex range", &["\u{0}", "\u{1f}"], &[" "]);
}

#[test]
fn negated_class() {
    let g = grammar(r"root ::= [^a-c\n]+");
    check(&g, "negated", &["xyz", "d", "é😀", "\u{0}"], &["xaz", "x\ny", "", "c"]);
}

#[test]
fn ranges() {
    check(&grammar("root ::= [a-cx-z0-9_]"), "ranges", &["b", "y", "5", "_"], &["d", "w", "-", "bb"]);
    // A "-" before "]" is itself.
    check(&grammar("root ::= [a-]"), "trailing dash", &["a", "-"], &["b"]);
    check(&grammar("root ::= [-a]"), "leading dash", &["a", "-"], &["b"]);
    check(&grammar("root ::= [ぁ-ゟ]"), "unicode range", &["ぁ", "ゟ", "は"], &["ァ"]);
}

#[test]
fn repetitions() {
    check(&grammar(r#"root ::= "ab"{2}"#), "{2}", &["abab"], &["ab", "ababab", "aba", ""]);
    check(&grammar("root ::= [x]{2,}"), "{2,}", &["xx", "xxxxx"], &["x", ""]);
    check(&grammar(r#"root ::= "a"{1,3}"#), "{1,3}", &["a", "aa", "aaa"], &["", "aaaa"]);
    check(&grammar(r#"root ::= "a"{ 0 , 2 } "b""#), "{0,2} with blanks", &["b", "ab", "aab"], &["aaab", "a"]);
    check(&grammar(r#"root ::= "a"{0} "b""#), "{0}", &["b"], &["ab"]);
    check(&grammar(r#"root ::= "a"? "b"* "c"+"#), "? * +", &["c", "abbccc", "bc"], &["aac", "ab", ""]);
    check(&grammar(r#"root ::= "ab"+"#), "+ on a literal", &["ab", "abab"], &["abb", "a"]);
    // A repetition applies to what the last one made: x{2}* is (x x)*.
    check(&grammar(r#"root ::= "x"{2}*"#), "{2}*", &["", "xx", "xxxx"], &["x", "xxx"]);
    // Above 2000 an upper bound reads as none (MAX_REPETITION_THRESHOLD).
    let g = grammar(r#"root ::= "a"{1,3000}"#);
    check(&g, "{1,3000}", &[&"a".repeat(2500)], &[""]);
}

#[test]
fn groups() {
    let g = grammar(r#"root ::= ("a" ("b" | "c")+ ("d" ("e")?)*)+"#);
    check(&g, "nested groups", &["ab", "abcbd", "abdedd", "acab"], &["a", "ade", "abe", "", "abdee"]);
    // A name directly followed by a group (c.gbnf's `factor((...`).
    check(&grammar("root ::= x(x)\nx ::= \"x\""), "name(group)", &["xx"], &["x"]);
}

#[test]
fn comments_and_newlines() {
    let text = "# leading comment\n\
                root ::= a b # trailing comment\n\
                # between rules\n\
                \n\
                a ::= \"x\" # \"quotes\" and ::= in a comment\n\
                b ::= ( \"y\" # inside a group\n\
                  | \"z\"\n\
                  )\n";
    check(&grammar(text), "comments", &["xy", "xz"], &["x", "xyz"]);
    check(&grammar("root ::= \"a\" |\n  \"b\" |\n\n    \"c\""), "newline after |", &["a", "b", "c"], &["", "ab"]);
    check(&grammar("root ::= (\n  \"a\"\n  \"b\"\n)\r\n"), "newlines in a group, CRLF", &["ab"], &["a"]);
    // Outside parentheses a newline ends the rule, so a "|" opening the next line is an error.
    refused("root ::= \"a\"\n  | \"b\"\n", "| after a newline");
}

#[test]
fn empty_alternatives() {
    let g = grammar("root ::= \"x\" opt \"y\"\nopt ::= | \"-\" | \"--\"");
    check(&g, "empty alternative", &["xy", "x-y", "x--y"], &["x---y", "x"]);
    // Nullable rules completing in their own set (the Earley pitfall Aycock & Horspool fix).
    let g = grammar("root ::= a a \"x\" a\na ::= e e | \"y\" e\ne ::= \"\"");
    check(&g, "nullable chain", &["x", "yx", "yyxy", "xy"], &["yyyx", ""]);
    check(&grammar("root ::= b* \"x\"\nb ::= | \"y\""), "star of nullable", &["x", "yyyx"], &["y"]);
}

#[test]
fn any_char() {
    check(&grammar(r#"root ::= "<" . ">""#), "dot", &["<é>", "<😀>", "<.>", "<\n>"], &["<>", "<ab>"]);
}

#[test]
fn llama_cpp_quirks() {
    // add_rule overwrites: a rule defined twice keeps its last definition.
    check(&grammar("root ::= \"a\"\nroot ::= \"b\""), "redefined", &["b"], &["a"]);
    // An empty class adds no symbol, so it matches the empty string.
    check(&grammar(r#"root ::= "a" [] "b""#), "empty class", &["ab"], &["a b"]);
    // Left recursion: llama.cpp refuses it at init; here it is recognized.
    check(&grammar(r#"root ::= root "a" | "b""#), "left recursion", &["b", "baa"], &["a", "ab"]);
}

#[test]
fn prefixes_are_exact() {
    // "b" leads only into `loop`, which derives no string: no viable prefix.
    let g = grammar("root ::= \"a\" | \"b\" loop\nloop ::= \"c\" loop");
    check(&g, "unproductive", &["a"], &["b", "bc"]);
    check_prefix(&g, "unproductive", &["", "a"], &["b", "bc"]);
    // [z-a] matches nothing.
    let g = grammar(r#"root ::= "m" [z-a] | "q""#);
    check_prefix(&g, "empty range", &["q"], &["m"]);
    // A root that derives nothing has no viable prefix, not even "".
    check_prefix(&grammar("root ::= root"), "empty language", &[], &["", "a"]);
}

#[test]
fn bad_syntax() {
    refused("root ::= foo", "undefined rule");
    refused("a ::= \"x\"", "no root");
    refused(r#"root ::= "\q""#, "unknown escape");
    refused(r#"root ::= "\x4g""#, "short hex escape");
    refused(r#"root ::= "abc"#, "unterminated string");
    refused("root ::= [abc", "unterminated class");
    refused(r#"root ::= ("a" "b""#, "missing )");
    refused(r#"root ::= "a" )"#, "stray )");
    refused("root ::= * \"a\"", "repetition of nothing");
    refused(r#"root ::= "a" | ?"#, "repetition of nothing after |");
    refused(r#"root ::= ""*"#, "repetition of an empty literal");
    refused(r#"root ::= "a"{2,1}"#, "n < m");
    refused(r#"root ::= "a"{x}"#, "not an int");
    refused(r#"root ::= "a"{2"#, "unclosed {");
    refused(r#"root ::= "a"{2001}"#, "more than 2000 repetitions");
    refused(r#"root ::= ("a"{0,50}){0,50}"#, "51 rules repeated 50 times");
    refused("root ::= <think> \"a\"", "tokens");
    refused("root ::= !<[1000]>", "negated tokens");
    refused("root \"a\"", "no ::=");
    refused("root ::= \"a\" @", "stray char");
    refused("Root ::= \"a\"", "names are case-sensitive: no root");
    assert!(Gbnf::parse(r#"root ::= ("a"{0,30}){0,50}"#).is_ok(), "31 rules repeated 50 times is under the limit");
    assert!(Gbnf::parse("root ::= QAPair\nQAPair ::= \"q\"").is_ok(), "names take capitals and digits");
}
