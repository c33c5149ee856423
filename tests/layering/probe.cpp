// Compiled by check_include.cmake with one layer's include views: includes HEADER.
#include HEADER
