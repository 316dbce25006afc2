# expect: q1=full q2=full q3=full
# why: each rule a class with staticmethods (a Rule base counting uses at module level); the pairs are the class's functions
# %%
import torch

import tracekit as tk

# %%
class Rule:
    uses = {}

    @classmethod
    def count(cls):
        Rule.uses[cls.__name__] = Rule.uses.get(cls.__name__, 0) + 1


class Div(Rule):
    @staticmethod
    def forward(a, b):
        Div.count()
        return a / b, (a, b)

    @staticmethod
    def backward(saved, grad):
        a, b = saved
        inv = b.reciprocal()
        return grad * inv, -grad * a * inv * inv


div_rule = (Div.forward, Div.backward)

# %%
class Tanh(Rule):
    @staticmethod
    def forward(x):
        Tanh.count()
        y = torch.tanh(x)
        return y, (y,)

    @staticmethod
    def backward(saved, grad):
        return grad * (1 - saved[0].square())


tanh_rule = (Tanh.forward, Tanh.backward)

# %%
class Sin(Rule):
    @staticmethod
    def forward(x):
        Sin.count()
        return torch.sin(x), (x,)

    @staticmethod
    def backward(saved, grad):
        return grad * saved[0].cos()


sin_rule = (Sin.forward, Sin.backward)

# %%
tk.check("ex10")
