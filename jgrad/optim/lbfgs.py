"""``LBFGS``: PyTorch's L-BFGS (after minFunc), with its closure semantics and its strong-Wolfe line search.

The algorithm is PyTorch's, step for step: the same flat gradient, the same two-loop recursion over the
history, the same first step ``min(1, 1/|g|_1) * lr``, the same line search (cubic interpolation, bracketing
and zoom phases) and the same stopping tests. Its scalars stay 0-d tensors where PyTorch's do (``gtd``,
``ys``, ``H_diag``, the line search's slopes), so a trajectory rounds as PyTorch's; every comparison with a
tolerance reads one of them on the host, as PyTorch's does.

Imports ``_tensor``, ``grad_mode``, ``ops`` (``cat``, ``zeros``) and ``optim.optimizer``.
"""
from __future__ import annotations

from ..autograd.grad_mode import enable_grad, no_grad
from ..ops.creation import zeros
from ..ops.shape import cat
from .optimizer import Optimizer

__all__ = ["LBFGS"]


def _cubic_interpolate(x1, f1, g1, x2, f2, g2, bounds=None):
    """The minimizer of the cubic through (x1, f1, g1) and (x2, f2, g2), clipped to ``bounds``."""
    xmin_bound, xmax_bound = bounds if bounds is not None else ((x1, x2) if x1 <= x2 else (x2, x1))
    d1 = g1 + g2 - 3 * (f1 - f2) / (x1 - x2)
    d2_square = d1 ** 2 - g1 * g2
    if d2_square >= 0:
        d2 = d2_square.sqrt()
        if x1 <= x2:
            min_pos = x2 - (x2 - x1) * ((g2 + d2 - d1) / (g2 - g1 + 2 * d2))
        else:
            min_pos = x1 - (x1 - x2) * ((g1 + d2 - d1) / (g1 - g2 + 2 * d2))
        return min(max(min_pos, xmin_bound), xmax_bound)
    return (xmin_bound + xmax_bound) / 2.0


class _Bracket:
    """The line search's interval: step sizes, losses, gradients and directional derivatives at its ends."""

    def __init__(self, t, f, g, gtd):
        self.t, self.f, self.g, self.gtd = t, f, g, gtd

    def set(self, i, t, f, g, gtd):
        self.t[i], self.f[i], self.g[i], self.gtd[i] = t, f, g, gtd

    def order(self):
        return (0, 1) if self.f[0] <= self.f[-1] else (1, 0)


def _bracketing(obj_func, x, t, d, f, g, gtd, c1, c2, max_ls):
    """Phase one: grow the step until the interval brackets a point satisfying the strong Wolfe conditions."""
    f_new, g_new = obj_func(x, t, d)
    evals, ls_iter = 1, 0
    gtd_new = g_new.dot(d)
    t_prev, f_prev, g_prev, gtd_prev = 0, f, g, gtd
    while ls_iter < max_ls:
        if f_new > (f + c1 * t * gtd) or (ls_iter > 1 and f_new >= f_prev):   # the sufficient decrease fails
            return _Bracket([t_prev, t], [f_prev, f_new], [g_prev, g_new.clone()], [gtd_prev, gtd_new]), False, \
                evals, ls_iter
        if abs(gtd_new) <= -c2 * gtd:                                          # strong Wolfe holds
            return _Bracket([t], [f_new], [g_new], [gtd_new]), True, evals, ls_iter
        if gtd_new >= 0:
            return _Bracket([t_prev, t], [f_prev, f_new], [g_prev, g_new.clone()], [gtd_prev, gtd_new]), False, \
                evals, ls_iter
        min_step, max_step = t + 0.01 * (t - t_prev), t * 10                  # extrapolate
        tmp = t
        t = _cubic_interpolate(t_prev, f_prev, gtd_prev, t, f_new, gtd_new, bounds=(min_step, max_step))
        t_prev, f_prev, g_prev, gtd_prev = tmp, f_new, g_new.clone(), gtd_new
        f_new, g_new = obj_func(x, t, d)
        evals += 1
        gtd_new = g_new.dot(d)
        ls_iter += 1
    # Reached max_ls: PyTorch's bracket keeps no slopes (the zoom below never runs then).
    return _Bracket([0, t], [f, f_new], [g, g_new], None), False, evals, ls_iter


def _strong_wolfe(obj_func, x, t, d, f, g, gtd, c1=1e-4, c2=0.9, tolerance_change=1e-9, max_ls=25):
    """PyTorch's ``_strong_wolfe``: returns ``(f_new, g_new, t, func_evals)``."""
    d_norm = d.abs().max()
    g = g.clone()
    br, done, evals, ls_iter = _bracketing(obj_func, x, t, d, f, g, gtd, c1, c2, max_ls)
    insuf_progress = False
    low, high = br.order()
    while not done and ls_iter < max_ls:                                       # phase two: zoom
        if abs(br.t[1] - br.t[0]) * d_norm < tolerance_change:
            break
        t = _cubic_interpolate(br.t[0], br.f[0], br.gtd[0], br.t[1], br.f[1], br.gtd[1])
        hi_t, lo_t = max(br.t), min(br.t)
        eps = 0.1 * (hi_t - lo_t)
        if min(hi_t - t, t - lo_t) < eps:                                      # too close to an end
            if insuf_progress or t >= hi_t or t <= lo_t:
                t = hi_t - eps if abs(t - hi_t) < abs(t - lo_t) else lo_t + eps
                insuf_progress = False
            else:
                insuf_progress = True
        else:
            insuf_progress = False
        f_new, g_new = obj_func(x, t, d)
        evals += 1
        gtd_new = g_new.dot(d)
        ls_iter += 1
        if f_new > (f + c1 * t * gtd) or f_new >= br.f[low]:
            br.set(high, t, f_new, g_new.clone(), gtd_new)
            low, high = br.order()
        else:
            if abs(gtd_new) <= -c2 * gtd:
                done = True
            elif gtd_new * (br.t[high] - br.t[low]) >= 0:
                br.set(high, br.t[low], br.f[low], br.g[low], br.gtd[low])
            br.set(low, t, f_new, g_new.clone(), gtd_new)
    return br.f[low], br.g[low], br.t[low], evals


class LBFGS(Optimizer):
    """L-BFGS, PyTorch's algorithm: ``step(closure)`` re-evaluates the model through ``closure`` (which zeroes
    the gradients, computes the loss, calls ``backward`` and returns the loss) up to ``max_eval`` times.

    One parameter group only; ``line_search_fn`` is None or ``"strong_wolfe"``.
    """

    def __init__(self, params, lr: float = 1, max_iter: int = 20, max_eval: int | None = None,
                 tolerance_grad: float = 1e-7, tolerance_change: float = 1e-9, history_size: int = 100,
                 line_search_fn: str | None = None):
        if not 0.0 <= lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        if max_eval is None:
            max_eval = max_iter * 5 // 4
        super().__init__(params, {"lr": lr, "max_iter": max_iter, "max_eval": max_eval,
                                  "tolerance_grad": tolerance_grad, "tolerance_change": tolerance_change,
                                  "history_size": history_size, "line_search_fn": line_search_fn})
        if len(self.param_groups) != 1:
            raise ValueError("LBFGS doesn't support per-parameter options (parameter groups)")
        self._params = self.param_groups[0]["params"]
        self._numel_cache = None

    def __setstate__(self, state):
        super().__setstate__(state)
        self._params = self.param_groups[0]["params"]
        self._numel_cache = None

    def _numel(self):
        if self._numel_cache is None:
            self._numel_cache = sum(p.numel() for p in self._params)
        return self._numel_cache

    def _gather_flat_grad(self):
        views = [zeros(p.numel(), dtype=p.dtype, device=p._device) if p.grad is None else p.grad.reshape(-1)
                 for p in self._params]
        return cat(views, 0)

    def _add_grad(self, step_size, update):
        alpha = float(step_size)  # PyTorch converts a 0-d tensor alpha to a Scalar the same way
        offset = 0
        for p in self._params:
            numel = p.numel()
            p.add_(update[offset:offset + numel].view_as(p), alpha=alpha)
            offset += numel

    def _clone_param(self):
        return [p.clone() for p in self._params]

    def _set_param(self, params_data):
        for p, pdata in zip(self._params, params_data):
            p.copy_(pdata)

    def _directional_evaluate(self, closure, x, t, d):
        self._add_grad(t, d)
        loss = float(closure())
        flat_grad = self._gather_flat_grad()
        self._set_param(x)
        return loss, flat_grad

    def step(self, closure):
        """Up to ``max_iter`` L-BFGS iterations; returns the loss of the first ``closure()`` call."""
        with no_grad():
            return self._step(closure)

    def _step(self, closure):
        def closure_with_grad():
            with enable_grad():
                return closure()

        group = self.param_groups[0]
        state = self.state[self._params[0]]
        state.setdefault("func_evals", 0)
        state.setdefault("n_iter", 0)
        orig_loss = closure_with_grad()
        loss = float(orig_loss)
        current_evals = 1
        state["func_evals"] += 1
        flat_grad = self._gather_flat_grad()
        if flat_grad.abs().max() <= group["tolerance_grad"]:
            return orig_loss
        s = {k: state.get(k) for k in ("d", "t", "old_dirs", "old_stps", "ro", "H_diag", "prev_flat_grad",
                                       "prev_loss")}
        n_iter = 0
        while n_iter < group["max_iter"]:
            n_iter += 1
            state["n_iter"] += 1
            self._direction(state, s, flat_grad, group["history_size"])
            if s["prev_flat_grad"] is None:
                s["prev_flat_grad"] = flat_grad.clone()
            else:
                s["prev_flat_grad"].copy_(flat_grad)
            s["prev_loss"] = loss
            lr = float(group["lr"])
            s["t"] = min(1.0, 1.0 / flat_grad.abs().sum()) * lr if state["n_iter"] == 1 else lr
            gtd = flat_grad.dot(s["d"])
            if gtd > -group["tolerance_change"]:                               # no descent along d
                break
            loss, flat_grad, opt_cond, ls_func_evals = self._move(closure_with_grad, group, s, loss, flat_grad, gtd,
                                                                   n_iter, current_evals)
            current_evals += ls_func_evals
            state["func_evals"] += ls_func_evals
            if n_iter == group["max_iter"] or current_evals >= group["max_eval"] or opt_cond:
                break
            if s["d"].mul(s["t"]).abs().max() <= group["tolerance_change"]:
                break
            if abs(loss - s["prev_loss"]) < group["tolerance_change"]:
                break
        state.update(s)
        return orig_loss

    @staticmethod
    def _direction(state, s, flat_grad, history_size):
        """The search direction ``s['d']``: steepest descent first, then the two-loop recursion."""
        if state["n_iter"] == 1:
            s["d"] = flat_grad.neg()
            s["old_dirs"], s["old_stps"], s["ro"], s["H_diag"] = [], [], [], 1
            return
        old_dirs, old_stps, ro = s["old_dirs"], s["old_stps"], s["ro"]
        y = flat_grad.sub(s["prev_flat_grad"])
        step = s["d"].mul(s["t"])
        ys = y.dot(step)
        if ys > 1e-10:                                                         # update the memory
            if len(old_dirs) == history_size:
                old_dirs.pop(0)
                old_stps.pop(0)
                ro.pop(0)
            old_dirs.append(y)
            old_stps.append(step)
            ro.append(1.0 / ys)
            s["H_diag"] = ys / y.dot(y)
        num_old = len(old_dirs)
        if "al" not in state:
            state["al"] = [None] * history_size
        al = state["al"]
        # PyTorch passes each al[i] as add_'s alpha, a Scalar: a host read per history entry (two per entry and
        # iteration: ~1100 a step of the time-sequence program, each a barrier in "auto" mode). The product as a
        # tensor is the same arithmetic (alpha * x rounded once, then the sum) and stays on the device.
        q = flat_grad.neg()
        for i in range(num_old - 1, -1, -1):
            al[i] = old_stps[i].dot(q) * ro[i]
            q.sub_(old_dirs[i] * al[i])
        r = q * s["H_diag"]
        for i in range(num_old):
            be_i = old_dirs[i].dot(r) * ro[i]
            r.add_(old_stps[i] * (al[i] - be_i))
        s["d"] = r

    def _move(self, closure, group, s, loss, flat_grad, gtd, n_iter, current_evals):
        """Step along ``s['d']`` (with the line search, or by ``s['t']``); returns the new loss, gradient, whether
        the gradient is below ``tolerance_grad``, and how many closure calls it made."""
        ls_func_evals = 0
        opt_cond = False
        if group["line_search_fn"] is not None:
            if group["line_search_fn"] != "strong_wolfe":
                raise RuntimeError("only 'strong_wolfe' is supported")
            x_init = self._clone_param()
            loss, flat_grad, s["t"], ls_func_evals = _strong_wolfe(
                lambda x, t, d: self._directional_evaluate(closure, x, t, d), x_init, s["t"], s["d"], loss,
                flat_grad, gtd, max_ls=group["max_eval"] - current_evals)
            self._add_grad(s["t"], s["d"])
            opt_cond = bool(flat_grad.abs().max() <= group["tolerance_grad"])
        else:
            self._add_grad(s["t"], s["d"])
            if n_iter != group["max_iter"]:
                loss = float(closure())
                flat_grad = self._gather_flat_grad()
                opt_cond = bool(flat_grad.abs().max() <= group["tolerance_grad"])
                ls_func_evals = 1
        return loss, flat_grad, opt_cond, ls_func_evals
