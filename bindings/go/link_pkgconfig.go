//go:build packlm_pkgconfig

package packlm

// With `-tags packlm_pkgconfig` the flags come from pkg-config's packlm.pc (an installed tree,
// found through PKG_CONFIG_PATH when it is not in a default place).

// #cgo pkg-config: packlm
import "C"
