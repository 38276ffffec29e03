//go:build !packlm_pkgconfig

package packlm

// Without the packlm_pkgconfig build tag the header and library are found through the
// compiler's defaults plus CGO_CFLAGS (-I, the folder holding packlm.h) and CGO_LDFLAGS (-L,
// the folder holding libpacklm.so; add -Wl,-rpath,DIR to run from there).

// #cgo LDFLAGS: -lpacklm
import "C"
