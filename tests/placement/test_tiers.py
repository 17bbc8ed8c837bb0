import numpy as np
import pytest

from flasheval.cli import main
from flasheval.errors import ConfigError, UnknownNameError
from flasheval.placement.tiers import load_tier_plan

GOOD = """name: t
stop_rule: interval
confidence_level: 0.9
correction: bonferroni
stages: [10, 30, all]
tiers:
  - {ranks: [1, 1], resolution: maximal}
  - {ranks: [2, null], resolution: 2}
"""


def _plan(tmp_path, text):
    path = tmp_path / "plan.yaml"
    path.write_text(text)
    return path


def test_shipped_plans_encode_the_paper_and_ours():
    fh = load_tier_plan("flash_helm")
    assert fh.stop_rule == "flash_helm" and fh.stages == (20, 50, 200, 1000, None)
    assert [(t.label, t.resolution, t.stop_stage) for t in fh.tiers] == [
        ("1", 0, None), ("2-4", 1, 1000), ("5-9", 2, 200), ("10-19", 3, 50), ("20+", 4, 20)]
    ours = load_tier_plan("default")
    assert ours.stop_rule == "window" and ours.stages[-1] is None and ours.estimator == "control-variate"
    assert ours.correction == "calibrated" and ours.pool_scale == 40
    assert load_tier_plan("lean").correction == "pocock" and load_tier_plan("lean").confidence_level == 0.8
    assert [t.resolution for t in ours.tiers] == [0, 1, 2, 3, 4]
    assert ours.tier_for(1).label == "1" and ours.tier_for(57).label == "20+"
    sized = [s for s in ours.stages if s is not None]
    ratios = [b / a for a, b in zip(sized, sized[1:])]
    assert max(ratios) < 1.3 and min(ratios) > 1.2  # a geometric grid, about ten looks per decade


def test_union_bound_over_looks_keeps_the_overall_error_at_alpha():
    from dataclasses import replace

    ours = replace(load_tier_plan("default"), correction="bonferroni")
    variances = [1.0 / s for s in ours.stages[:-1]] + [0.0]  # the last stage scores every example: it cannot err
    levels = ours.look_levels(variances)
    assert sum(1 - lv for lv in levels[:-1]) == pytest.approx(1 - ours.confidence_level)


def test_pocock_boundary_lies_between_one_look_and_the_union_bound():
    from dataclasses import replace

    from scipy import stats

    ours = replace(load_tier_plan("default"), correction="pocock")  # the calibrated default's upper bound
    variances = [1.0 / s for s in ours.stages[:-1]] + [0.0]
    z = stats.norm.isf((1 - np.array(ours.look_levels(variances))) / 2)
    assert np.allclose(z, z[0])  # one constant for every look
    assert stats.norm.isf(0.025) + 0.5 < z[0] < stats.norm.isf(0.025 / 18) - 0.15
    # without a pool, the calibrated correction's levels are Pocock's, its upper bound (look_plan calibrates)
    assert load_tier_plan("default").look_levels(variances) == ours.look_levels(variances)


def test_pool_scaling_reduces_to_the_papers_tiers_at_40_and_scales_in_proportion():
    ours = load_tier_plan("default")
    assert ours.for_pool(40).tiers == ours.for_pool(12).tiers == ours.tiers
    doubled = ours.for_pool(80)
    assert [(t.first, t.last, t.resolution) for t in doubled.tiers] == [
        (1, 1, 0), (2, 8, 2), (9, 18, 4), (19, 38, 6), (39, None, 8)]
    for n in (41, 69, 137, 200, 301):  # every rank of the pool is in exactly one tier, resolution ~ k * n / 40
        plan = ours.for_pool(n)
        assert [plan.tier_for(r).resolution for r in (1, n)] == [0, round(4 * n / 40)]
        assert sum(1 for r in range(1, n + 1) for t in plan.tiers if t.contains(r)) == n
    assert ours.for_pool(200).for_pool(200) == ours.for_pool(200)


def test_look_levels_spend_alpha_across_looks(tmp_path):
    plan = load_tier_plan(_plan(tmp_path, GOOD))
    assert plan.look_levels([0.1, 0.03, 0.0])[0] == pytest.approx(1 - 0.1 / 2)  # two looks can err, the last cannot
    geo = load_tier_plan(_plan(tmp_path, GOOD.replace("bonferroni", "geometric")))
    assert [round(lv, 4) for lv in geo.look_levels([0.1, 0.03, 0.0])] == [0.95, 0.975, 0.9875]
    none = load_tier_plan(_plan(tmp_path, GOOD.replace("bonferroni", "none")))
    assert none.look_levels([0.1, 0.03, 0.0]) == (0.9, 0.9, 0.9)


@pytest.mark.parametrize("change, message", [
    (("stop_rule: interval", "stop_rule: vibes"), "field 'stop_rule': unknown value 'vibes'"),
    (("stages: [10, 30, all]", "stages: [30, 10, all]"), "stages must be strictly increasing"),
    (("stages: [10, 30, all]", "stages: [10, 30]"), "the last stage must be 'all'"),
    (("[2, null], resolution: 2", "[3, null], resolution: 2"), "tier 1 starts at 3, expected 2"),
    (("resolution: 2", "resolution: 0"), "resolution must be 'maximal' or an integer >= 1"),
    (("name: t", "name: t\ncolour: red"), "field 'colour': unknown key 'colour'"),
    (("stop_rule: interval", "stop_rule: flash_helm"), "needs stop_stage on every tier"),
    (("confidence_level: 0.9", "confidence_level: 95"), "field 'confidence_level': must be a number in [0.5, 1)"),
    (("resolution: maximal}", "resolution: maximal, min_stage: 20}"), "field 'tiers[0].min_stage': min_stage 20 is not a stage"),
    (("name: t", "name: t\npool_scale: 1"), "field 'pool_scale': must be an integer >= 2"),
    (("stop_rule: interval", "stop_rule: vibes"), "allowed: window, interval, flash_helm"),
    (("correction: bonferroni", "correction: calibrated"), "field 'correction': 'calibrated' is calibrated to the window rule"),
    (("stop_rule: interval\nconfidence_level: 0.9\ncorrection: bonferroni\nstages: [10, 30, all]",
      "stop_rule: window\nconfidence_level: 0.9\ncorrection: calibrated\nstages: [10, 30, all]"), None),
])
def test_bad_plans_are_refused_with_the_field(tmp_path, change, message):
    if message is None:  # the window rule with the calibrated constant is a valid plan; with min_stage it is not
        assert load_tier_plan(_plan(tmp_path, GOOD.replace(*change))).correction == "calibrated"
        change = (GOOD, GOOD.replace(*change).replace("resolution: maximal}", "resolution: maximal, min_stage: 30}"))
        message = "field 'correction': 'calibrated' assumes the rule may stop at every look"
    with pytest.raises(ConfigError) as err:
        load_tier_plan(_plan(tmp_path, GOOD.replace(*change)))
    assert message in str(err.value) and "plan.yaml" in str(err.value)


def test_unknown_plan_name_lists_shipped_plans():
    with pytest.raises(UnknownNameError, match="allowed: default, flash_helm, lean"):
        load_tier_plan("nope")


def test_tiers_validate_cli(tmp_path, capsys):
    assert main(["tiers", "validate", "flash_helm"]) == 0
    assert "ranks 10-19  resolution +-3, stops at 50" in capsys.readouterr().out
    assert main(["tiers", "validate", str(_plan(tmp_path, GOOD.replace("all]", "40]")))]) == 1
    assert "the last stage must be 'all'" in capsys.readouterr().err


def test_tiers_validate_prints_the_per_look_level_of_the_plans_correction(capsys):
    assert main(["tiers", "validate", "lean"]) == 0
    out = capsys.readouterr().out
    # Pocock's constant at 80% for the 18 geometric looks on datasets larger than every stage
    assert "correction pocock: first look at 0.9" in out and "on datasets larger than the last stage" in out
    assert main(["tiers", "validate", "default"]) == 0
    out = capsys.readouterr().out
    # Pocock's constant for the same looks at 95%, z = 2.75, bounds the calibrated constant
    assert "correction calibrated: every look at most 0.9940 (Pocock's" in out
