/* An empty shared library: preloaded by bench/run-overhead's "empty"
 * configuration, it shows what LD_PRELOAD costs by itself, apart from
 * anything libqpsock.so does. */
void qpsock_bench_empty_preload(void);
void qpsock_bench_empty_preload(void) {}
