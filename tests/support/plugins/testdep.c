/* A helper library that libtern-nodep.so links against.  The tests build it
 * into a directory that is on no search path and give the plugin no RPATH,
 * so dlopen of the plugin fails with "cannot open shared object file". */
__attribute__((visibility("default"))) int tern_testdep_value(void);

int tern_testdep_value(void) { return 42; }
