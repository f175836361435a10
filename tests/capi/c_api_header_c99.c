/* include/weft/weft.h on its own, as strict C99 (-std=c99 -pedantic
   -Werror): no C++ and no POSIX needed to include it. Each header under
   weft/c/ is also compiled alone, in a unit c_api_tests.cmake generates. */
#include "weft/weft.h"

/* One definition, so the unit is not empty; uses a few of the types. */
int weft_header_is_c99(void);
int weft_header_is_c99(void) {
  weft_executor_params p;
  weft_save_callback on_saved = NULL;
  p.struct_size = sizeof p;
  return (int)(p.struct_size > 0) + (int)WEFT_OK + (int)(on_saved != NULL);
}
