(** The tanh bound (docs/certificate.md §2): if every logit moves by at most [cmax], then
    [TV(softmax l, softmax lt) ≤ (1 − e^{−cmax})/(1 + e^{−cmax})], which is [tanh(cmax/2)].

    The proof here is not the two-point extremal argument of the prose but an equivalent direct one:
    on the tokens whose weight grew ([P]), [TV = p(P) − p̃(P)]; the likelihood ratios lie in
    [[α, β]] with [α/β = e^{−2 cmax}], so [p(P) ≤ β p̃(P)] and [1 − p(P) ≥ α (1 − p̃(P))], and
    eliminating [β] leaves a square. *)

From Coq Require Import Reals Lra Lia Psatz.
From Witcert Require Import Sum EForm.
Open Scope R_scope.

(** The algebraic core: [T ≤ π(β − 1)] and [T ≤ (1 − π)(1 − s²β)] give [T ≤ (1 − s)/(1 + s)]. *)
Lemma tanh_algebra (T pi beta s : R) :
  0 <= pi <= 1 -> 0 < s <= 1 ->
  T <= pi * (beta - 1) -> T <= (1 - pi) * (1 - s ^ 2 * beta) ->
  T <= (1 - s) / (1 + s).
Proof.
  intros Hpi Hs H1 H2.
  set (D := pi + s ^ 2 * (1 - pi)).
  assert (Hs2 : 0 < s ^ 2) by (apply pow_lt; lra).
  assert (HD : 0 < D).
  { unfold D. assert (0 <= s ^ 2 * (1 - pi)) by (apply Rmult_le_pos; lra).
    destruct (Rlt_or_le 0 pi); [lra|]. assert (pi = 0) by lra. subst. lra. }
  assert (HTD : T * D <= pi * (1 - pi) * (1 - s ^ 2)).
  { assert (T * (s ^ 2 * (1 - pi)) <= pi * (beta - 1) * (s ^ 2 * (1 - pi)))
      by (apply Rmult_le_compat_r; [nra | exact H1]).
    assert (T * pi <= (1 - pi) * (1 - s ^ 2 * beta) * pi) by (apply Rmult_le_compat_r; [lra | exact H2]).
    unfold D. nra. }
  assert (Hsq : pi * (1 - pi) * (1 + s) ^ 2 <= D).
  { unfold D. assert (0 <= (pi - (1 - pi) * s) ^ 2) by apply pow2_ge_0. nra. }
  assert (HT : T * (1 + s) <= 1 - s).
  { apply (Rmult_le_reg_r D); [exact HD|].
    assert (pi * (1 - pi) * (1 - s ^ 2) * (1 + s) <= (1 - s) * D).
    { replace (pi * (1 - pi) * (1 - s ^ 2) * (1 + s)) with ((1 - s) * (pi * (1 - pi) * (1 + s) ^ 2)) by ring.
      apply Rmult_le_compat_l; [lra | exact Hsq]. }
    nra. }
  apply (Rmult_le_reg_r (1 + s)); [lra|]. unfold Rdiv. rewrite Rmult_assoc, Rinv_l, Rmult_1_r by lra. exact HT.
Qed.

Definition sel (p q : nat -> R) (i : nat) : R := if Rlt_dec (q i) (p i) then 1 else 0.

(** With equal total mass, half the ℓ1 distance is the mass gained where [p > q]. *)
Lemma tv_positive_part n p q :
  sumn n p = sumn n q ->
  tv n p q = sumn n (fun i => sel p q i * p i) - sumn n (fun i => sel p q i * q i).
Proof.
  intros Heq. unfold tv.
  rewrite (sumn_ext n (fun i => Rabs (p i - q i))
             (fun i => 2 * (sel p q i * p i - sel p q i * q i) - (p i - q i))).
  2: { intros i _. unfold sel. destruct (Rlt_dec (q i) (p i)).
       - rewrite Rabs_pos_eq by lra. ring.
       - rewrite Rabs_left1 by lra. ring. }
  rewrite sumn_minus, sumn_scal, !sumn_minus, Heq. field.
Qed.

Theorem tanh_bound : forall n (l lt : nat -> R) (cmax : R),
  (0 < n)%nat ->
  (forall i, (i < n)%nat -> Rabs (lt i - l i) <= cmax) ->
  tv n (softmax n l) (softmax n lt) <= (1 - exp (- cmax)) / (1 + exp (- cmax)).
Proof.
  intros n l lt cmax Hn Hc.
  set (p := softmax n l). set (pt := softmax n lt).
  set (eps := fun i => lt i - l i).
  set (Z := sumn n (fun i => pt i * exp (- eps i))).
  assert (Hpt : forall i, 0 < pt i) by (intros; apply softmax_pos, Hn).
  assert (Hs1 : sumn n pt = 1) by apply softmax_sum, Hn.
  assert (Hp1 : sumn n p = 1) by apply softmax_sum, Hn.
  assert (HZ : 0 < Z) by (apply sumn_pos; [exact Hn | intros; apply Rmult_lt_0_compat; [apply Hpt | apply exp_pos]]).
  assert (Hp : forall i, p i = pt i * (exp (- eps i) / Z)) by (intros i; apply softmax_reweighted, Hn).
  set (beta := exp cmax / Z). set (s := exp (- cmax)).
  assert (Hs : 0 < s <= 1).
  { split; [apply exp_pos|]. unfold s. rewrite <- exp_0. apply exp_le.
    specialize (Hc 0%nat Hn). pose proof (Rabs_pos (lt 0%nat - l 0%nat)). lra. }
  assert (Hrho : forall i, (i < n)%nat -> s ^ 2 * beta <= exp (- eps i) / Z <= beta).
  { intros i Hi. specialize (Hc i Hi). apply Rabs_le_inv in Hc. unfold beta, s, eps, Rdiv.
    assert (Hinv : exp (- cmax) * exp cmax = 1)
      by (rewrite <- exp_plus; replace (- cmax + cmax) with 0 by ring; apply exp_0).
    assert (E : exp (- cmax) ^ 2 * (exp cmax * / Z) = exp (- cmax) * / Z).
    { replace (exp (- cmax) ^ 2 * (exp cmax * / Z)) with (exp (- cmax) * (exp (- cmax) * exp cmax) * / Z)
        by ring.
      rewrite Hinv. ring. }
    rewrite E.
    assert (0 < / Z) by (apply Rinv_0_lt_compat, HZ).
    split; apply Rmult_le_compat_r; try lra; apply exp_le; lra. }
  set (X := sumn n (fun i => sel p pt i * p i)).
  set (pi := sumn n (fun i => sel p pt i * pt i)).
  assert (Hsel : forall i, sel p pt i = 0 \/ sel p pt i = 1) by (intros; unfold sel; destruct Rlt_dec; auto).
  assert (Hpi : 0 <= pi <= 1).
  { split.
    - apply sumn_nonneg. intros i _. destruct (Hsel i) as [-> | ->]; pose proof (Hpt i); lra.
    - rewrite <- Hs1. apply sumn_le. intros i _. destruct (Hsel i) as [-> | ->]; pose proof (Hpt i); lra. }
  rewrite (tv_positive_part n p pt) by lra. fold X pi.
  apply (tanh_algebra (X - pi) pi beta s Hpi Hs).
  - (* p(P) ≤ β·p̃(P) *)
    assert (X <= beta * pi).
    { unfold X, pi. rewrite <- sumn_scal. apply sumn_le. intros i Hi. rewrite Hp.
      destruct (Hrho i Hi) as [_ H]. destruct (Hsel i) as [-> | ->]; pose proof (Hpt i); nra. }
    lra.
  - (* 1 − p(P) ≥ α·(1 − p̃(P)), α = s²β *)
    assert (H1X : 1 - X = sumn n (fun i => (1 - sel p pt i) * p i))
      by (unfold X; rewrite <- Hp1 at 1; rewrite <- sumn_minus; apply sumn_ext; intros; ring).
    assert (H1pi : 1 - pi = sumn n (fun i => (1 - sel p pt i) * pt i))
      by (unfold pi; rewrite <- Hs1 at 1; rewrite <- sumn_minus; apply sumn_ext; intros; ring).
    assert (s ^ 2 * beta * (1 - pi) <= 1 - X).
    { rewrite H1X, H1pi, <- sumn_scal. apply sumn_le. intros i Hi. rewrite Hp.
      destruct (Hrho i Hi) as [H _]. destruct (Hsel i) as [-> | ->]; pose proof (Hpt i); nra. }
    nra.
Qed.
