/* The C API, found on the include path (pkg-config's cflags, or -Xcc -I<dir of packlm.h>). */
#include <packlm.h>
