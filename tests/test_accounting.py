from __future__ import annotations

import math

import pytest

from dpsynth.privacy import (
    Budget,
    BudgetExceeded,
    Charge,
    Ledger,
    LedgerError,
    epsilon_from_rho,
    gaussian_rho,
    gaussian_sigma,
    rho_from_epsilon,
    rho_from_pure_epsilon,
)


@pytest.mark.parametrize("sigma", [0.5, 1.0, 3.0, 10.0, 100.0])
@pytest.mark.parametrize("delta", [1e-3, 1e-6, 1e-10])
def test_conversion_matches_opendp(sigma, delta):
    dp = pytest.importorskip("opendp.prelude")
    dp.enable_features("contrib")
    meas = dp.m.make_gaussian(dp.atom_domain(T=float, nan=False), dp.absolute_distance(T=float), scale=sigma)
    reference = dp.c.make_zCDP_to_approxDP(meas).map(1.0).epsilon(delta)
    ours = epsilon_from_rho(gaussian_rho(1.0, sigma), delta)
    assert ours == pytest.approx(reference, rel=1e-7)


def test_conversion_beats_the_classic_bound_and_inverts():
    for rho in (1e-4, 0.01, 0.5, 2.0):
        for delta in (1e-5, 1e-9):
            eps = epsilon_from_rho(rho, delta)
            assert eps < rho + 2 * math.sqrt(rho * math.log(1 / delta))
            assert rho_from_epsilon(eps, delta) == pytest.approx(rho, rel=1e-9)
    assert epsilon_from_rho(0.0, 1e-6) == 0.0


def test_helpers():
    assert rho_from_pure_epsilon(2.0) == 2.0
    assert gaussian_sigma(1.0, gaussian_rho(1.0, 3.0)) == pytest.approx(3.0)
    with pytest.raises(ValueError, match="delta"):
        epsilon_from_rho(0.1, 0.0)
    with pytest.raises(ValueError, match="epsilon"):
        rho_from_epsilon(-1.0, 1e-6)


@pytest.mark.parametrize("kw, word", [
    ({"epsilon": 0, "delta": 1e-6}, "epsilon"),
    ({"epsilon": float("inf"), "delta": 1e-6}, "epsilon"),
    ({"epsilon": 1, "delta": -1e-6}, "delta"),
    ({"epsilon": 1, "delta": 1.5}, "delta"),
])
def test_budget_validates(kw, word):
    with pytest.raises(ValueError, match=word):
        Budget(**kw)


def test_ledger_refuses_a_plan_over_budget():
    b = Budget(epsilon=1.0, delta=1e-6)
    Ledger(b, [Charge(stage="a", rho=b.rho / 2), Charge(stage="b", rho=b.rho / 2)])
    with pytest.raises(BudgetExceeded, match="allows rho"):
        Ledger(b, [Charge(stage="a", rho=b.rho / 2), Charge(stage="b", rho=b.rho * 0.51)])
    with pytest.raises(LedgerError, match="twice"):
        Ledger(b, [Charge(stage="a", rho=0.001), Charge(stage="a", rho=0.001)])


def test_ledger_spends_each_planned_stage_once():
    b = Budget(epsilon=1.0, delta=1e-6)
    led = Ledger(b, [Charge(stage="a", rho=b.rho / 4), Charge(stage="b", rho=b.rho / 4)])
    led.spend("a")
    with pytest.raises(LedgerError, match="already"):
        led.spend("a")
    with pytest.raises(LedgerError, match="not planned"):
        led.spend("c")
    assert led.rho_spent == pytest.approx(b.rho / 4)
    d = led.to_dict()
    assert [s["spent"] for s in d["stages"]] == [True, False]
    assert d["epsilon_spent"] < 1.0


def test_pure_charges_compose_by_basic_composition():
    from dpsynth.privacy import total_epsilon

    b = Budget(epsilon=1.0, delta=1e-6)
    half_rho = rho_from_epsilon(0.5, 1e-6)
    led = Ledger(b, [Charge(stage="count", epsilon=0.5, mechanism="laplace"), Charge(stage="g", rho=half_rho)])
    led.spend("count"), led.spend("g")
    assert led.epsilon_spent() == pytest.approx(1.0, rel=1e-9)
    assert total_epsilon([Charge(stage="x", epsilon=0.3)], 1e-6) == pytest.approx(0.3)
    with pytest.raises(BudgetExceeded, match="pure"):
        Ledger(b, [Charge(stage="count", epsilon=0.51), Charge(stage="g", rho=half_rho)])
    with pytest.raises(BudgetExceeded):
        Ledger(b, [Charge(stage="count", epsilon=1.01)])
