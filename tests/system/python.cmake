# The Python binding's tests (python/tests, pytest), each file one CTest
# test run with the interpreter the binding was built for, importing the
# package from build/python.  A file that needs numpy skips (CTest shows
# "Skipped") when numpy is missing; so do all when pytest is.
# test_python_pip (and test_python_pip_path, with the python3 first on PATH
# when that is another interpreter): `pip install ./python` into fresh
# venvs (a clean clone, an installed prefix).
if(NOT TERN_PYTHON_BUILT)
  return()
endif()

# Under TERN_SANITIZE the module is instrumented but the interpreter is
# not: the sanitizer runtime is preloaded, leak checking is off (the
# interpreter's own allocations at exit are not the binding's), and reports
# go where `make test-asan` collects them.
set(_tern_py_env "PYTHONPATH=${TERN_PYTHON_DIR}" "PYTHONDONTWRITEBYTECODE=1")
if(TERN_SANITIZE)
  execute_process(COMMAND ${CMAKE_C_COMPILER} -print-file-name=libasan.so
                  OUTPUT_VARIABLE _tern_libasan OUTPUT_STRIP_TRAILING_WHITESPACE)
  list(APPEND _tern_py_env "LD_PRELOAD=${_tern_libasan}"
       "ASAN_OPTIONS=detect_leaks=0:log_path=${CMAKE_BINARY_DIR}/asan-logs/asan-python")
endif()

set(_tern_pytests api errors gil lifecycle logging mooncake stats timeouts transfer v2)
foreach(t ${_tern_pytests})
  add_test(NAME python_${t}
    COMMAND ${TERN_PYTHON_EXECUTABLE} -m pytest -q -rs -p no:cacheprovider
            ${PROJECT_SOURCE_DIR}/python/tests/test_${t}.py
    WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}/python/tests)
  set_tests_properties(python_${t} PROPERTIES
    ENVIRONMENT "${_tern_py_env}"
    SKIP_REGULAR_EXPRESSION "could not import .numpy.|No module named pytest|libtern without the application API v2"
    TIMEOUT 600)
endforeach()

# Not under TERN_SANITIZE: a package linked with an instrumented libtern
# cannot be imported by a plain interpreter.
if(TERN_SANITIZE)
  return()
endif()
add_test(NAME test_python_pip
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/test_python_pip.sh ${PROJECT_SOURCE_DIR}
          ${CMAKE_BINARY_DIR} ${TERN_PYTHON_EXECUTABLE})
set_tests_properties(test_python_pip PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 1200)

# The README's commands say `python3`: the one first on PATH may be another
# interpreter (a pyenv CPython without `wheel`); when it is, the same test
# runs with it too.
execute_process(COMMAND python3 -c "import sys; print(sys.executable)"
                OUTPUT_VARIABLE _tern_path_py OUTPUT_STRIP_TRAILING_WHITESPACE
                RESULT_VARIABLE _tern_path_py_rc ERROR_QUIET)
if(_tern_path_py_rc EQUAL 0 AND _tern_path_py)
  get_filename_component(_tern_path_py_real ${_tern_path_py} REALPATH)
  get_filename_component(_tern_py_real ${TERN_PYTHON_EXECUTABLE} REALPATH)
  if(NOT _tern_path_py_real STREQUAL _tern_py_real)
    add_test(NAME test_python_pip_path
      COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/test_python_pip.sh ${PROJECT_SOURCE_DIR}
              ${CMAKE_BINARY_DIR} ${_tern_path_py})
    set_tests_properties(test_python_pip_path PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 1200)
  endif()
endif()
