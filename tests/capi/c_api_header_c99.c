/* include/weft/weft.h on its own, as strict C99 (-std=c99 -pedantic
   -Werror): no C++ and no POSIX needed to include it. */
#include "weft/weft.h"

/* One definition, so the unit is not empty; uses a few of the types. */
int weft_header_is_c99(void);
int weft_header_is_c99(void) {
  weft_executor_params p;
  p.struct_size = sizeof p;
  return (int)(p.struct_size > 0) + (int)WEFT_OK;
}
