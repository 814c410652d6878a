"""Privacy primitives: budget and ledger, zCDP accounting, noise, generators."""

from .accounting import epsilon_from_rho, gaussian_rho, gaussian_sigma, rho_from_epsilon, rho_from_pure_epsilon
from .budget import Budget, BudgetExceeded, Charge, Ledger, LedgerError, total_epsilon
from .noise import discrete_gaussian, discrete_laplace, gaussian_on_grid, grid_sensitivity, laplace_on_grid

__all__ = [
    "Budget",
    "BudgetExceeded",
    "Charge",
    "Ledger",
    "LedgerError",
    "discrete_gaussian",
    "discrete_laplace",
    "epsilon_from_rho",
    "gaussian_on_grid",
    "gaussian_rho",
    "gaussian_sigma",
    "grid_sensitivity",
    "laplace_on_grid",
    "rho_from_epsilon",
    "rho_from_pure_epsilon",
    "total_epsilon",
]
