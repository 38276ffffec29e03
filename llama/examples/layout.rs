//! Prints every C struct of the facade as `name size N` and `name.field offset N` lines, for
//! tests/llama/layout.sh to compare with what a C compiler makes of llama.h.
fn main() {
    for l in llama::abi::layouts() {
        println!("{} size {}", l.name, l.size);
        for (field, offset) in l.fields {
            println!("{}.{} offset {}", l.name, field, offset);
        }
    }
}
