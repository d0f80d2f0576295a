# The Python binding's tests (python/tests, pytest), each file one CTest
# test run with the interpreter the binding was built for, importing the
# package from build/python.  A file that needs numpy skips (CTest shows
# "Skipped") when numpy is missing; so do all when pytest is.
# test_python_pip: `pip install ./python` into fresh venvs (a clean clone,
# an installed prefix).
if(NOT TERN_PYTHON_BUILT)
  return()
endif()

set(_tern_pytests api errors gil mooncake transfer v2)
foreach(t ${_tern_pytests})
  add_test(NAME python_${t}
    COMMAND ${TERN_PYTHON_EXECUTABLE} -m pytest -q -rs -p no:cacheprovider
            ${PROJECT_SOURCE_DIR}/python/tests/test_${t}.py
    WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}/python/tests)
  set_tests_properties(python_${t} PROPERTIES
    ENVIRONMENT "PYTHONPATH=${TERN_PYTHON_DIR};PYTHONDONTWRITEBYTECODE=1"
    SKIP_REGULAR_EXPRESSION "could not import .numpy.|No module named pytest|libtern without the application API v2"
    TIMEOUT 600)
endforeach()

add_test(NAME test_python_pip
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/test_python_pip.sh ${PROJECT_SOURCE_DIR}
          ${CMAKE_BINARY_DIR} ${TERN_PYTHON_EXECUTABLE})
set_tests_properties(test_python_pip PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 1200)
