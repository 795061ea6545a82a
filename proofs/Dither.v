(** The dither's sub-Gaussian proxy (docs/certificate.md §4.3) and the union bound (§4.4).

    [U], uniform on the [K = 2^m] midpoints [(2j + 1 − K)/(2K)], has
    [E e^{λU} ≤ exp(λ² (1 − 1/K²)/24)] for every real [λ]: a sub-Gaussian variance proxy of
    [(1 − 1/K²)/12].  The proof halves the grid: [E e^{λU_{m+1}} = cosh(λ/4)·E e^{(λ/2) U_m}], with
    [cosh x ≤ e^{x²/2}] (by the mean value theorem, twice).

    The union bound: on a finite sample space with non-negative weights, the weight of "some event
    of a finite family holds" is at most the sum of the events' weights. *)

From Coq Require Import Reals Lra Lia Psatz.
From Witcert Require Import Sum.
Open Scope R_scope.

Lemma sinh_nonneg t : 0 <= t -> 0 <= sinh t.
Proof.
  intros H. unfold sinh. assert (exp (- t) <= exp t).
  { destruct (Req_dec t 0) as [-> | Hn]; [rewrite Ropp_0; lra|]. left; apply exp_increasing; lra. }
  lra.
Qed.

(** [sinh t ≤ t cosh t] for [t ≥ 0]: [k(t) = t cosh t − sinh t] has [k(0) = 0], [k' = t sinh t]. *)
Lemma sinh_le_t_cosh x : 0 <= x -> sinh x <= x * cosh x.
Proof.
  intros Hx. destruct (Req_dec x 0) as [-> | Hn]; [unfold sinh; rewrite Ropp_0; lra|].
  set (k := fun t => t * cosh t - sinh t).
  assert (Hd : forall c, 0 <= c <= x -> derivable_pt_lim k c (c * sinh c)).
  { intros c _. unfold k.
    change (fun t => t * cosh t - sinh t) with (minus_fct (mult_fct id cosh) sinh).
    pose proof (derivable_pt_lim_minus (mult_fct id cosh) sinh c _ _
                  (derivable_pt_lim_mult id cosh c _ _ (derivable_pt_lim_id c) (derivable_pt_lim_cosh c))
                  (derivable_pt_lim_sinh c)) as H.
    match type of H with derivable_pt_lim _ _ ?l => replace (c * sinh c) with l by (unfold id; ring) end.
    exact H. }
  destruct (MVT_cor2 k (fun c => c * sinh c) 0 x ltac:(lra) Hd) as (c & Hc & Hrange).
  unfold k in Hc. rewrite Rmult_0_l, sinh_0 in Hc.
  assert (0 <= c * sinh c) by (apply Rmult_le_pos; [lra | apply sinh_nonneg; lra]).
  assert (0 <= c * sinh c * (x - 0)) by (apply Rmult_le_pos; lra).
  lra.
Qed.

(** [cosh x ≤ exp(x²/2)]: [h(t) = cosh t · e^{−t²/2}] has [h(0) = 1] and
    [h' = e^{−t²/2}(sinh t − t cosh t) ≤ 0] for [t ≥ 0]; [cosh] is even. *)
Lemma cosh_le_exp_sq x : cosh x <= exp (x ^ 2 / 2).
Proof.
  assert (Hpos : forall x, 0 <= x -> cosh x <= exp (x ^ 2 / 2)).
  { clear x. intros x Hx. destruct (Req_dec x 0) as [-> | Hn].
    { rewrite cosh_0. replace (0 ^ 2 / 2) with 0 by field. rewrite exp_0. lra. }
    set (g := fun t => - / 2 * (t * t)).
    set (h := fun t => cosh t * exp (g t)).
    set (h' := fun t => exp (g t) * (sinh t - t * cosh t)).
    assert (Hd : forall c, 0 <= c <= x -> derivable_pt_lim h c (h' c)).
    { intros c _. unfold h, h'.
      change (fun t => cosh t * exp (g t)) with (mult_fct cosh (comp exp g)).
      assert (Hg : derivable_pt_lim g c (- c)).
      { unfold g. change (fun t => - / 2 * (t * t)) with (mult_fct (fct_cte (- / 2)) (mult_fct id id)).
        pose proof (derivable_pt_lim_mult (fct_cte (- / 2)) (mult_fct id id) c _ _
                      (derivable_pt_lim_const (- / 2) c)
                      (derivable_pt_lim_mult id id c _ _ (derivable_pt_lim_id c) (derivable_pt_lim_id c))) as H.
        match type of H with derivable_pt_lim _ _ ?l =>
          replace (- c) with l by (unfold mult_fct, fct_cte, id; field) end.
        exact H. }
      pose proof (derivable_pt_lim_mult cosh (comp exp g) c _ _ (derivable_pt_lim_cosh c)
                    (derivable_pt_lim_comp g exp c _ _ Hg (derivable_pt_lim_exp (g c)))) as H.
      match type of H with derivable_pt_lim _ _ ?l =>
        replace (exp (g c) * (sinh c - c * cosh c)) with l by (unfold comp; ring) end.
      exact H. }
    destruct (MVT_cor2 h h' 0 x ltac:(lra) Hd) as (c & Hc & Hrange).
    assert (Hh0 : h 0 = 1) by (unfold h, g; rewrite cosh_0; replace (- / 2 * (0 * 0)) with 0 by ring; rewrite exp_0; ring).
    assert (Hh'c : h' c <= 0).
    { unfold h'. pose proof (sinh_le_t_cosh c ltac:(lra)). pose proof (exp_pos (g c)). nra. }
    assert (Hhx : h x <= 1) by (rewrite Hh0 in Hc; assert (h' c * (x - 0) <= 0) by nra; lra).
    unfold h, g in Hhx.
    assert (E : exp (x ^ 2 / 2) * exp (- / 2 * (x * x)) = 1)
      by (rewrite <- exp_plus; replace (x ^ 2 / 2 + - / 2 * (x * x)) with 0 by field; apply exp_0).
    assert (Hpe : 0 < exp (x ^ 2 / 2)) by apply exp_pos.
    assert (Hm : cosh x * exp (- / 2 * (x * x)) * exp (x ^ 2 / 2) <= 1 * exp (x ^ 2 / 2))
      by (apply Rmult_le_compat_r; lra).
    replace (cosh x * exp (- / 2 * (x * x)) * exp (x ^ 2 / 2)) with (cosh x * (exp (x ^ 2 / 2) * exp (- / 2 * (x * x))))
      in Hm by ring.
    rewrite E in Hm. lra. }
  destruct (Rle_dec 0 x) as [H | H]; [apply Hpos, H|].
  replace (cosh x) with (cosh (- x)) by (unfold cosh; rewrite Ropp_involutive; field).
  replace (x ^ 2) with ((- x) ^ 2) by ring. apply Hpos. lra.
Qed.

Lemma cosh_pos x : 0 < cosh x.
Proof. unfold cosh. pose proof (exp_pos x). pose proof (exp_pos (- x)). lra. Qed.

(** The [K = 2^m] midpoints and the moment generating function of the uniform law on them. *)
Definition grid (m j : nat) : R := (2 * INR j + 1 - 2 ^ m) / (2 * 2 ^ m).

Definition mgf (m : nat) (lam : R) : R := / 2 ^ m * sumn (2 ^ m) (fun j => exp (lam * grid m j)).

Lemma pow2_pos m : 0 < 2 ^ m.
Proof. apply pow_lt. lra. Qed.

Lemma INR_pow2 m : INR (2 ^ m) = 2 ^ m.
Proof. rewrite pow_INR. simpl. replace (1 + 1) with 2 by ring. reflexivity. Qed.

Lemma mgf_step m lam : mgf (S m) lam = cosh (lam / 4) * mgf m (lam / 2).
Proof.
  unfold mgf. pose proof (pow2_pos m) as HK.
  replace (2 ^ S m)%nat with (2 ^ m + 2 ^ m)%nat by (simpl; lia).
  rewrite sumn_add, <- sumn_plus.
  rewrite (sumn_ext (2 ^ m) _ (fun j => 2 * cosh (lam / 4) * exp (lam / 2 * grid m j))).
  2: { intros j _. unfold grid, cosh. rewrite plus_INR, INR_pow2. simpl pow.
       replace (lam * ((2 * INR j + 1 - 2 * 2 ^ m) / (2 * (2 * 2 ^ m))))
         with (lam / 2 * ((2 * INR j + 1 - 2 ^ m) / (2 * 2 ^ m)) + - (lam / 4)) by (field; lra).
       replace (lam * ((2 * (2 ^ m + INR j) + 1 - 2 * 2 ^ m) / (2 * (2 * 2 ^ m))))
         with (lam / 2 * ((2 * INR j + 1 - 2 ^ m) / (2 * 2 ^ m)) + lam / 4) by (field; lra).
       rewrite !exp_plus. field. }
  rewrite sumn_scal. simpl pow. field. lra.
Qed.

Theorem dither_mgf : forall m lam, mgf m lam <= exp (lam ^ 2 * (1 - / (2 ^ m) ^ 2) / 24).
Proof.
  induction m as [|m IH]; intros lam.
  - unfold mgf, grid. cbn [Nat.pow sumn pow INR].
    replace (lam * ((2 * 0 + 1 - 1) / (2 * 1))) with 0 by field.
    replace (lam * (lam * 1) * (1 - / (1 * (1 * 1))) / 24) with 0 by field. rewrite exp_0. lra.
  - rewrite mgf_step.
    assert (Hm : 0 <= mgf m (lam / 2)).
    { unfold mgf. apply Rmult_le_pos; [apply Rlt_le, Rinv_0_lt_compat, pow2_pos|].
      apply sumn_nonneg. intros; apply Rlt_le, exp_pos. }
    eapply Rle_trans.
    { apply Rmult_le_compat; [apply Rlt_le, cosh_pos | exact Hm | apply cosh_le_exp_sq | apply IH]. }
    rewrite <- exp_plus. pose proof (pow2_pos m).
    right. f_equal. simpl pow. field. lra.
Qed.

(** The union bound over a finite family, on a finite sample space with weights [w ≥ 0]. *)
Fixpoint anyb (S : nat) (A : nat -> bool) : bool :=
  match S with O => false | S k => anyb k A || A k end.

Definition indb (b : bool) : R := if b then 1 else 0.

Lemma indb_anyb S A : indb (anyb S A) <= sumn S (fun i => indb (A i)).
Proof.
  induction S as [|S IH]; simpl; [lra|].
  assert (0 <= indb (A S)) by (unfold indb; destruct (A S); lra).
  assert (0 <= sumn S (fun i => indb (A i))) by (apply sumn_nonneg; intros; unfold indb; destruct (A i); lra).
  unfold indb at 1. destruct (anyb S A) eqn:E1; destruct (A S) eqn:E2; simpl;
    unfold indb in *; rewrite ?E1, ?E2 in *; lra.
Qed.

Theorem union_bound : forall (N S : nat) (w : nat -> R) (A : nat -> nat -> bool),
  (forall o, (o < N)%nat -> 0 <= w o) ->
  sumn N (fun o => w o * indb (anyb S (fun i => A i o))) <=
  sumn S (fun i => sumn N (fun o => w o * indb (A i o))).
Proof.
  intros N S w A Hw. rewrite sumn_swap. apply sumn_le. intros o Ho.
  rewrite (sumn_scal S (w o) (fun i => indb (A i o))). apply Rmult_le_compat_l; [apply Hw, Ho | apply indb_anyb].
Qed.
