// swift-tools-version:5.9
// PackLM: Swift classes over libpacklm's C API. The header and library are found through
// pkg-config's packlm.pc when it is installed, else through flags given to `swift build`:
//   swift test -Xcc -I<repo>/include -Xlinker -L<repo>/target/release -Xlinker -rpath -Xlinker <repo>/target/release
import PackageDescription

let package = Package(
    name: "PackLM",
    products: [
        .library(name: "PackLM", targets: ["PackLM"]),
        .executable(name: "packlm-swift-host", targets: ["PackLMHost"]),
        .executable(name: "packlm-swift-chat", targets: ["PackLMChat"]),
    ],
    targets: [
        .systemLibrary(name: "CPackLM", pkgConfig: "packlm"),
        .target(name: "PackLM", dependencies: ["CPackLM"]),
        .executableTarget(name: "PackLMHost", dependencies: ["PackLM"]),
        .executableTarget(name: "PackLMChat", dependencies: ["PackLM"]),
        .testTarget(name: "PackLMTests", dependencies: ["PackLM"]),
    ]
)
