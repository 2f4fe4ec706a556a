# Run by `cmake --install` (tools/install/CMakeLists.txt): installs DDPKIT_API_HEADERS and every
# ddpkit header they include, followed to the end, under DDPKIT_INCLUDE_DESTINATION — and
# fails, naming the include chain, if that reaches a header outside the installed libraries
# (tools/, tests/): the API must not need the binary's code.
cmake_policy(PUSH)  # an install script starts with no policies set; this one needs if(IN_LIST)
cmake_policy(SET CMP0057 NEW)
set(_todo ${DDPKIT_API_HEADERS})
set(_seen)
while(_todo)
  list(POP_FRONT _todo _header)
  if(_header IN_LIST _seen)
    continue()
  endif()
  list(APPEND _seen ${_header})
  if(NOT _header MATCHES "^(autograd|comm|join|reducer|tools|tests)/")
    continue()  # a library's header ("absl/...", "nlohmann/..."): its own package has it
  endif()
  if(_header MATCHES "^(tools|tests)/")
    message(FATAL_ERROR "ddpkit install: ${_header} (included by ${_by_${_header}}) is not part "
                        "of an installed library; an API header may include only autograd/, "
                        "comm/, join/ and reducer/ headers")
  endif()
  if(_header MATCHES "\\.pb\\.h$")  # protoc's output, in the build tree
    set(_file ${DDPKIT_BINARY_DIR}/${_header})
  else()
    set(_file ${DDPKIT_SOURCE_DIR}/${_header})
  endif()
  if(NOT EXISTS ${_file})
    message(FATAL_ERROR "ddpkit install: ${_file} (included by ${_by_${_header}}) does not "
                        "exist; build ddpkit before installing it")
  endif()
  get_filename_component(_dir ${_header} DIRECTORY)
  file(INSTALL DESTINATION ${DDPKIT_INCLUDE_DESTINATION}/${_dir} TYPE FILE FILES ${_file})
  file(STRINGS ${_file} _includes REGEX "^#include \"")
  foreach(_line IN LISTS _includes)
    string(REGEX REPLACE "^#include \"([^\"]+)\".*" "\\1" _included "${_line}")
    if(NOT DEFINED _by_${_included})
      set(_by_${_included} ${_header})
    endif()
    list(APPEND _todo ${_included})
  endforeach()
endwhile()
cmake_policy(POP)
