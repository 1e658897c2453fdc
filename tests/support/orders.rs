//! Every order of a builder's calls, for the tests that its result does not
//! depend on them.

/// Applies `steps` to `start` in every order and asserts that `finish` gives the
/// same result for each; returns that result.
pub fn same_in_every_order<B, R>(start: &B, steps: &[&dyn Fn(B) -> B], finish: impl Fn(B) -> R) -> R
where
    B: Clone,
    R: PartialEq + std::fmt::Debug,
{
    let run = |order: &[usize]| finish(order.iter().fold(start.clone(), |b, i| steps[*i](b)));
    let first: Vec<usize> = (0..steps.len()).collect();
    let expected = run(&first);
    for order in orders(steps.len()) {
        assert_eq!(run(&order), expected, "the steps in the order {order:?}");
    }
    expected
}

/// Every order of `n` steps, as lists of their indices.
pub fn orders(n: usize) -> Vec<Vec<usize>> {
    if n == 0 {
        return vec![Vec::new()];
    }
    let mut all = Vec::new();
    for order in orders(n - 1) {
        for at in 0..=order.len() {
            let mut longer = order.clone();
            longer.insert(at, n - 1);
            all.push(longer);
        }
    }
    all
}
