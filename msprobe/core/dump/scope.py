"""The scope/list filter of a dump (framework-free; PyTorch and MindSpore)."""


class Scope:
    """scope ([start, end] range) plus list (substring) filter, evaluated on every checked name."""

    def __init__(self, scope, names):
        self.start, self.end = (scope[0], scope[1]) if scope else (None, None)
        self.names = tuple(names)
        self.in_range = not scope
        self.open_expanders = 0   # mix: modules matching a list item currently executing

    def check(self, name):
        if self.start is not None:
            if name == self.start:
                self.in_range = True
            hit = self.in_range
            if name == self.end:
                self.in_range = False
            if not hit:
                return False
        if not self.names:
            return True
        if self.open_expanders:
            return True
        return any(item in name for item in self.names)

    def module_matches(self, name):
        return bool(self.names) and any(item in name for item in self.names)
