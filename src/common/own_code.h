// qpsock's own machine code, mapped into a forked child in one call. fork
// copies no page-table entries of a file's pages, so a child would
// otherwise take a page fault at each stretch of qpsock's code it first
// runs (its fork wrapper, reads, writes, close, exit): several per child of
// a server that forks at every connection.
#pragma once

namespace qpsock {

// At library load: finds the executable segment of the object this code is in.
void locate_own_code();
// In a forked child, as its first fork handler: maps that segment's pages
// (MADV_POPULATE_READ, Linux 5.14; earlier kernels refuse it, and the child
// faults them in as before). errno is left alone.
void map_own_code_in_child();

}  // namespace qpsock
