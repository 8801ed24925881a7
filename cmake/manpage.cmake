# cmake -DPROG=EXE -DNAME=NAME -DVERSION=V -DOUT=FILE -P manpage.cmake
# Writes NAME(1) from `EXE --help`: the help text, verbatim, in man(7) form.
execute_process(COMMAND ${PROG} --help OUTPUT_VARIABLE help ERROR_VARIABLE err RESULT_VARIABLE rc)
if(NOT rc EQUAL 0 OR help STREQUAL "")
  message(FATAL_ERROR "${PROG} --help exited ${rc}: ${err}")
endif()
string(REPLACE "\\" "\\e" help "${help}")
string(REGEX REPLACE "(^|\n)([.'])" "\\1\\\\&\\2" help "${help}")
string(TIMESTAMP date "%Y-%m-%d" UTC)
file(WRITE ${OUT} ".TH ${NAME} 1 \"${date}\" \"pyagent ${VERSION}\" \"pyagent\"
.SH NAME
${NAME} \\- part of pyagent, a continuous profiler for CPython
.SH DESCRIPTION
.nf
${help}.fi
.SH SEE ALSO
pyagent(1), pyagent-render(1), pyagent-collector(1)
")
