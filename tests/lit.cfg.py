# lit configuration for Kiln's text tests: tests/ir (IR in, FileCheck out), tests/passes
# (one pass at a time), tests/cli (the commands) and tests/error (inputs that must be
# rejected with a given message).
import os
import lit.formats

config.name = "kiln"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".kir", ".test"]
config.test_source_root = os.path.dirname(__file__)
config.excludes = ["unit", "fuzz", "ops", "fixtures", "CMakeLists.txt", "lit.cfg.py", "lit.site.cfg.py.in"]
# before %kiln, which is its prefix: the build's lib directory (tests/unit/fake_cuda.c's driver)
config.substitutions.append(("%kiln_lib", os.path.join(os.path.dirname(config.kiln_bin), "lib")))
config.substitutions.append(("%kiln", os.path.join(config.kiln_bin, "kiln")))
config.substitutions.append(("FileCheck", config.filecheck))
config.substitutions.append(("%src", config.kiln_src))
# The tests' Python (tests/CMakeLists.txt: one with numpy where there is one); never a bare python3.
config.substitutions.append(("%python", config.python))
if config.python_numpy.upper() in ("ON", "1", "TRUE", "YES"):
    config.available_features.add("numpy")
elif os.environ.get("KILN_TEST_REQUIRE", "0") != "0":
    lit_config.fatal("KILN_TEST_REQUIRE is set and %s has no numpy (run tools/setup.sh)" % config.python)
sanitize = config.sanitize.upper() in ("ON", "1", "TRUE", "YES")
# LeakSanitizer leaves out what third-party libraries keep (tests/lsan.supp), as under ctest.
if sanitize:
    for var in ("ASAN_OPTIONS", "UBSAN_OPTIONS"):
        if var in os.environ:
            config.environment[var] = os.environ[var]
    config.environment["LSAN_OPTIONS"] = ":".join(
        v for v in (os.environ.get("LSAN_OPTIONS", ""), "suppressions=" + config.lsan_suppressions) if v)
# A C program linked against a model compiled by `kiln compile` must use the same
# sanitizers as the libkiln_rt.a inside that model.
config.substitutions.append(("%sanitize",
    "-fsanitize=address,undefined" if sanitize else ""))
# Python loading such a model through ctypes: under the sanitizers their runtimes must come first
# (LD_PRELOAD), and Python's own allocations at exit are not the model's leaks.
python_so = config.python
if sanitize:
    import subprocess
    libs = [subprocess.run(["cc", "-print-file-name=" + lib], capture_output=True, text=True).stdout.strip()
            for lib in ("libasan.so", "libubsan.so")]
    python_so = "env LD_PRELOAD='%s' ASAN_OPTIONS=detect_leaks=0 %s" % (" ".join(libs), config.python)
# before %python, which is a prefix of it
config.substitutions.insert(0, ("%python_so", python_so))
