// libtandem.so and the GPU plug-in libtandem_gpu.so are the layers' archives linked whole
// (src/CMakeLists.txt); neither has code of its own. CMake wants a source per library.
namespace tandem {}
