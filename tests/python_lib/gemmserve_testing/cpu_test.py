"""cpu.py's rule for the BLIS configuration against the CPUs the gate meets, whichever
this one is: the cases compute_environment_test.cc holds BlisArchitectureFor to, so the
integration tests' expectations and the server agree on machines other than this one
(ctest: testing_cpu_rules)."""
import unittest

from gemmserve_testing.cpu import blis_config_for, highest_isa, int8_dot_build, isa_levels_below

AVX2 = {"avx2", "fma", "f16c"}
AVX512 = AVX2 | {"avx512f", "avx512bw", "avx512vl", "avx512dq"}
ZEN4 = AVX512 | {"avx512_bf16", "avx512_vnni"}  # Sapphire Rapids adds avx512_fp16
ZEN5 = ZEN4 | {"avx_vnni"}
ALDER_LAKE = AVX2 | {"avx_vnni"}
OLDER = {"sse4_2", "avx"}


class BlisConfigForTest(unittest.TestCase):
    def test_any_avx512_cpu_runs_skx_whatever_blis_picked(self):
        for own in ("generic", "zen3", "haswell", "skx"):
            self.assertEqual(blis_config_for(own, ZEN4, ZEN4), "skx", own)
            self.assertEqual(blis_config_for(own, AVX512, AVX512), "skx", own)

    def test_an_avx2_cap_keeps_a_known_avx2_choice_and_narrows_an_avx512_one(self):
        # Zen 4: BLIS 0.9 picks zen3, which stands under the cap (the failure of issue 37).
        self.assertEqual(blis_config_for("zen3", AVX2, ZEN4), "zen3")
        # Zen 5 (BLIS knows no such family) and newer Intel CPUs.
        self.assertEqual(blis_config_for("generic", AVX2, ZEN4), "haswell")
        self.assertEqual(blis_config_for("haswell", AVX2, ZEN4), "haswell")
        # Skylake-X, which BLIS knows: its AVX-512 choice is too wide under the cap.
        for own in ("skx", "knl"):
            self.assertEqual(blis_config_for(own, AVX2, AVX512), "haswell", own)

    def test_an_uncapped_avx2_cpu_keeps_what_blis_knows(self):
        for own in ("zen", "zen2", "zen3", "haswell"):
            self.assertEqual(blis_config_for(own, AVX2, AVX2), own)
        self.assertEqual(blis_config_for("generic", AVX2, AVX2), "haswell")

    def test_the_generic_cap_runs_the_reference_kernels_and_older_cpus_keep_blis_choice(self):
        for own in ("skx", "zen3", "sandybridge", "generic"):
            self.assertEqual(blis_config_for(own, OLDER, ZEN4), "generic", own)
        self.assertEqual(blis_config_for("sandybridge", OLDER, OLDER), "sandybridge")
        self.assertEqual(blis_config_for("generic", OLDER, OLDER), "generic")

    def test_avx512_needs_every_flag_of_the_build(self):
        self.assertEqual(highest_isa(AVX512 - {"avx512dq"}), "avx2")
        self.assertEqual(highest_isa(AVX512 - {"fma"}), "generic")
        self.assertEqual(highest_isa(ZEN4), "avx512_bf16")


class LevelsTest(unittest.TestCase):
    """Every level below the CPU's that changes the kernels, each 8-bit build selected by
    one (the rules of CapCpuFeatures and PickInt8Dot, cpu_features_test.cc)."""

    def test_each_cpu_gets_the_levels_that_change_its_kernels(self):
        self.assertEqual(isa_levels_below(ZEN5), ["avx512", "avx2_vnni", "avx2", "generic"])
        self.assertEqual(isa_levels_below(ZEN4), ["avx512", "avx2", "generic"])
        self.assertEqual(isa_levels_below(AVX512), ["avx2", "generic"])
        self.assertEqual(isa_levels_below(ALDER_LAKE), ["avx2", "generic"])
        self.assertEqual(isa_levels_below(AVX2), ["generic"])
        self.assertEqual(isa_levels_below(OLDER), [])

    def test_the_8_bit_build_follows_the_flags(self):
        self.assertEqual(int8_dot_build(ZEN5), "avx512_vnni")
        self.assertEqual(int8_dot_build(ALDER_LAKE), "avx_vnni")
        self.assertEqual(int8_dot_build(AVX512 | {"avx_vnni"}), "avx_vnni")
        self.assertEqual(int8_dot_build(AVX512), "avx2")
        self.assertEqual(int8_dot_build(OLDER), "generic")


if __name__ == "__main__":
    unittest.main(verbosity=2)
