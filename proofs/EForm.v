(** The e-form (docs/certificate.md §1) and the two readings of p̃ (§10.4).

    [n] tokens; [l] the exact logits, [lt] the logits the weights are formed from; [c] bounds the
    logit error token by token.  [TV(softmax l, softmax lt) ≤ (A² − 1)/2] with
    [A = Σ_t softmax(lt)_t e^{c_t}]. *)

From Coq Require Import Reals Lra Lia Psatz.
From Witcert Require Import Sum.
Open Scope R_scope.

Lemma exp_le x y : x <= y -> exp x <= exp y.
Proof. intros [H | H]; [apply Rlt_le, exp_increasing, H | rewrite H; lra]. Qed.

Lemma Rabs_le_inv x y : Rabs x <= y -> - y <= x <= y.
Proof. intros H. unfold Rabs in H. destruct (Rcase_abs x); lra. Qed.

Definition softmax (n : nat) (l : nat -> R) (i : nat) : R := exp (l i) / sumn n (fun j => exp (l j)).

Definition tv (n : nat) (p q : nat -> R) : R := / 2 * sumn n (fun i => Rabs (p i - q i)).

Definition eform_A (n : nat) (lt c : nat -> R) : R := sumn n (fun i => softmax n lt i * exp (c i)).

Lemma sum_exp_pos n l : (0 < n)%nat -> 0 < sumn n (fun j => exp (l j)).
Proof. intros H. apply sumn_pos; [exact H | intros; apply exp_pos]. Qed.

Lemma softmax_pos n l i : (0 < n)%nat -> 0 < softmax n l i.
Proof. intros H. unfold softmax. apply Rdiv_lt_0_compat; [apply exp_pos | apply sum_exp_pos; exact H]. Qed.

Lemma softmax_sum n l : (0 < n)%nat -> sumn n (softmax n l) = 1.
Proof.
  intros H. unfold softmax. unfold Rdiv.
  rewrite (sumn_ext n (fun i => exp (l i) * / sumn n (fun j => exp (l j)))
                       (fun i => / sumn n (fun j => exp (l j)) * exp (l i))) by (intros; ring).
  rewrite sumn_scal. field. apply Rgt_not_eq, sum_exp_pos, H.
Qed.

(** [A] as a ratio of exponential sums: what the kernels' λ and lse estimate. *)
Lemma eform_A_ratio n lt c : (0 < n)%nat ->
  eform_A n lt c = sumn n (fun i => exp (lt i + c i)) / sumn n (fun j => exp (lt j)).
Proof.
  intros H. unfold eform_A, softmax, Rdiv.
  rewrite (sumn_ext n (fun i => exp (lt i) * / sumn n (fun j => exp (lt j)) * exp (c i))
                       (fun i => / sumn n (fun j => exp (lt j)) * exp (lt i + c i)))
    by (intros; rewrite exp_plus; ring).
  rewrite sumn_scal. ring.
Qed.

Lemma eform_A_ge_1 n lt c : (0 < n)%nat -> (forall i, (i < n)%nat -> 0 <= c i) -> 1 <= eform_A n lt c.
Proof.
  intros Hn Hc. rewrite <- (softmax_sum n lt Hn). unfold eform_A.
  apply sumn_le. intros i Hi.
  assert (1 <= exp (c i)) by (rewrite <- exp_0; apply exp_le, Hc, Hi).
  pose proof (softmax_pos n lt i Hn). nra.
Qed.

(** The exact weights as the compressed ones reweighted: [p_i = p̃_i e^{−ε_i} / Z],
    [ε = lt − l], [Z = Σ p̃ e^{−ε}]. *)
Lemma softmax_reweighted n l lt i : (0 < n)%nat ->
  softmax n l i = softmax n lt i * (exp (- (lt i - l i)) /
                                    sumn n (fun j => softmax n lt j * exp (- (lt j - l j)))).
Proof.
  intros Hn. unfold softmax.
  assert (HS : 0 < sumn n (fun j => exp (lt j))) by apply sum_exp_pos, Hn.
  assert (HS' : 0 < sumn n (fun j => exp (l j))) by apply sum_exp_pos, Hn.
  rewrite (sumn_ext n (fun i0 => exp (lt i0) / sumn n (fun j => exp (lt j)) * exp (- (lt i0 - l i0)))
                       (fun i0 => / sumn n (fun j => exp (lt j)) * exp (l i0)))
    by (intros j _; unfold Rdiv; replace (l j) with (lt j + - (lt j - l j)) at 2 by ring;
        rewrite exp_plus; ring).
  rewrite sumn_scal.
  replace (exp (l i)) with (exp (lt i) * exp (- (lt i - l i))) by (rewrite <- exp_plus; f_equal; ring).
  field. split; lra.
Qed.

(** The main theorem of §1. *)
Theorem e_form : forall n (l lt c : nat -> R),
  (0 < n)%nat ->
  (forall i, (i < n)%nat -> Rabs (lt i - l i) <= c i) ->
  tv n (softmax n l) (softmax n lt) <= (eform_A n lt c ^ 2 - 1) / 2.
Proof.
  intros n l lt c Hn Hc.
  assert (Hc0 : forall i, (i < n)%nat -> 0 <= c i)
    by (intros i Hi; specialize (Hc i Hi); pose proof (Rabs_pos (lt i - l i)); lra).
  set (pt := softmax n lt). set (A := eform_A n lt c).
  set (eps := fun i => lt i - l i).
  set (Z := sumn n (fun i => pt i * exp (- eps i))).
  assert (Hpt : forall i, 0 < pt i) by (intros; apply softmax_pos, Hn).
  assert (Hsum1 : sumn n pt = 1) by apply softmax_sum, Hn.
  (* p_i = pt_i · e^{−ε_i} / Z *)
  assert (HZpos : 0 < Z) by (apply sumn_pos; [exact Hn | intros; apply Rmult_lt_0_compat; [apply Hpt | apply exp_pos]]).
  assert (Hp : forall i, softmax n l i = pt i * (exp (- eps i) / Z))
    by (intros i; apply softmax_reweighted, Hn).
  (* 1/A ≤ Z ≤ A *)
  assert (HA1 : 1 <= A) by (apply eform_A_ge_1; assumption).
  assert (HZle : Z <= A).
  { unfold Z, A, eform_A. apply sumn_le. intros i Hi. fold pt.
    apply Rmult_le_compat_l; [apply Rlt_le, Hpt|]. apply exp_le.
    specialize (Hc i Hi). unfold eps. apply Rabs_le_inv in Hc. lra. }
  assert (HZge : 1 <= A * Z).
  { assert (Hlow : sumn n (fun i => pt i / exp (c i)) <= Z).
    { unfold Z. apply sumn_le. intros i Hi. unfold Rdiv. apply Rmult_le_compat_l; [apply Rlt_le, Hpt|].
      rewrite <- exp_Ropp. apply exp_le. specialize (Hc i Hi). unfold eps. apply Rabs_le_inv in Hc. lra. }
    pose proof (sumn_harmonic n pt (fun i => exp (c i))
                  (fun i _ => conj (Rlt_le _ _ (Hpt i)) (exp_pos (c i)))) as Hh.
    rewrite Hsum1 in Hh.
    assert (HA : A = sumn n (fun i => pt i * exp (c i))) by reflexivity. rewrite <- HA in Hh.
    apply Rle_trans with (A * sumn n (fun i => pt i / exp (c i))); [lra|].
    apply Rmult_le_compat_l; lra. }
  (* |ρ_i − 1| ≤ A e^{c_i} − 1 *)
  assert (Hrho : forall i, (i < n)%nat -> Rabs (exp (- eps i) / Z - 1) <= A * exp (c i) - 1).
  { intros i Hi. specialize (Hc i Hi). unfold eps in *. apply Rabs_le_inv in Hc.
    assert (He1 : exp (- (lt i - l i)) <= exp (c i)) by (apply exp_le; lra).
    assert (He2 : exp (- c i) <= exp (- (lt i - l i))) by (apply exp_le; lra).
    rewrite exp_Ropp in He2.
    assert (Hec : 1 <= exp (c i)) by (rewrite <- exp_0; apply exp_le; lra).
    set (x := A * exp (c i)). assert (Hx : 1 <= x) by (unfold x; nra).
    set (r := exp (- (lt i - l i)) / Z).
    assert (Hr_hi : r <= x).
    { unfold r, x, Rdiv. apply Rle_trans with (exp (c i) * / Z).
      - apply Rmult_le_compat_r; [apply Rlt_le, Rinv_0_lt_compat; lra | lra].
      - assert (/ Z <= A) by (apply (Rmult_le_reg_l Z); [lra|]; rewrite Rinv_r; lra).
        rewrite Rmult_comm. apply Rmult_le_compat_r; [apply Rlt_le, exp_pos | lra]. }
    assert (Hr_lo : / x <= r).
    { unfold r, x, Rdiv. rewrite Rinv_mult, (Rmult_comm (/ A)).
      assert (/ A <= / Z) by (apply Rinv_le_contravar; lra).
      apply Rmult_le_compat; try (apply Rlt_le, Rinv_0_lt_compat; try apply exp_pos; lra); lra. }
    assert (/ x <= 1) by (rewrite <- Rinv_1; apply Rinv_le_contravar; lra).
    assert (1 - / x <= x - 1).
    { assert (x * (1 - / x) = x - 1) by (field; lra).
      assert (0 <= x - 1) by lra. nra. }
    apply Rabs_le. split; lra. }
  unfold tv.
  rewrite (sumn_ext n (fun i => Rabs (softmax n l i - pt i)) (fun i => pt i * Rabs (exp (- eps i) / Z - 1))).
  2: { intros i _. rewrite Hp. replace (pt i * (exp (- eps i) / Z) - pt i) with (pt i * (exp (- eps i) / Z - 1)) by ring.
       rewrite Rabs_mult, (Rabs_pos_eq (pt i)) by (apply Rlt_le, Hpt). reflexivity. }
  assert (Hb : sumn n (fun i => pt i * Rabs (exp (- eps i) / Z - 1)) <= sumn n (fun i => pt i * (A * exp (c i) - 1))).
  { apply sumn_le. intros i Hi. apply Rmult_le_compat_l; [apply Rlt_le, Hpt | apply Hrho, Hi]. }
  rewrite (sumn_ext n (fun i => pt i * (A * exp (c i) - 1)) (fun i => A * (pt i * exp (c i)) - pt i)) in Hb
    by (intros; ring).
  rewrite sumn_minus, sumn_scal, Hsum1 in Hb.
  assert (HA : A = sumn n (fun i => pt i * exp (c i))) by reflexivity. rewrite <- HA in Hb.
  replace (A ^ 2 - 1) with (A * A - 1) by ring. lra.
Qed.

(** §10.4, reading 2: the exact weights [softmax lt] with [|lt − l| ≤ c − γ], while the kernel's
    weights [softmax lk] satisfy [|lk − lt| ≤ γ ≤ Γ]: [A' ≤ A·e^Γ], so
    [TV(softmax l, softmax lt) ≤ ((A e^Γ)² − 1)/2] with [A] the kernel's [eform_A n lk c]. *)
Theorem e_form_exact_weights : forall n (l lt lk c g : nat -> R) (G : R),
  (0 < n)%nat ->
  (forall i, (i < n)%nat -> Rabs (lt i - l i) <= c i - g i /\ Rabs (lk i - lt i) <= g i /\ g i <= G) ->
  tv n (softmax n l) (softmax n lt) <= ((eform_A n lk c * exp G) ^ 2 - 1) / 2.
Proof.
  intros n l lt lk c g G Hn H.
  eapply Rle_trans; [apply (e_form n l lt (fun i => c i - g i) Hn); intros i Hi; apply H, Hi|].
  assert (Hc0 : forall i, (i < n)%nat -> 0 <= c i - g i)
    by (intros i Hi; destruct (H i Hi) as [H1 _]; pose proof (Rabs_pos (lt i - l i)); lra).
  assert (H1 : 1 <= eform_A n lt (fun i => c i - g i)) by (apply eform_A_ge_1; assumption).
  assert (Hle : eform_A n lt (fun i => c i - g i) <= eform_A n lk c * exp G).
  { rewrite !eform_A_ratio by exact Hn.
    assert (HS : 0 < sumn n (fun j => exp (lt j))) by apply sum_exp_pos, Hn.
    assert (HK : 0 < sumn n (fun j => exp (lk j))) by apply sum_exp_pos, Hn.
    assert (Hnum : sumn n (fun i => exp (lt i + (c i - g i))) <= sumn n (fun i => exp (lk i + c i))).
    { apply sumn_le. intros i Hi. apply exp_le. destruct (H i Hi) as [_ [H2 _]].
      apply Rabs_le_inv in H2. lra. }
    assert (Hden : exp (- G) * sumn n (fun j => exp (lk j)) <= sumn n (fun j => exp (lt j))).
    { rewrite <- sumn_scal. apply sumn_le. intros i Hi. rewrite <- exp_plus. apply exp_le.
      destruct (H i Hi) as [_ [H2 H3]]. apply Rabs_le_inv in H2. lra. }
    rewrite exp_Ropp in Hden.
    apply Rle_trans with (sumn n (fun i => exp (lk i + c i)) / sumn n (fun j => exp (lt j))).
    - unfold Rdiv. apply Rmult_le_compat_r; [apply Rlt_le, Rinv_0_lt_compat, HS | exact Hnum].
    - assert (HEG : 0 < exp G) by apply exp_pos.
      assert (0 <= sumn n (fun i => exp (lk i + c i))) by (apply sumn_nonneg; intros; apply Rlt_le, exp_pos).
      apply (Rmult_le_reg_r (sumn n (fun j => exp (lt j)))); [exact HS|].
      unfold Rdiv. rewrite Rmult_assoc, Rinv_l, Rmult_1_r by lra.
      replace (sumn n (fun i => exp (lk i + c i)) * / sumn n (fun j => exp (lk j)) * exp G * sumn n (fun j => exp (lt j)))
        with (sumn n (fun i => exp (lk i + c i)) * (exp G * sumn n (fun j => exp (lt j)) / sumn n (fun j => exp (lk j))))
        by (field; lra).
      assert (1 <= exp G * sumn n (fun j => exp (lt j)) / sumn n (fun j => exp (lk j))).
      { apply (Rmult_le_reg_r (sumn n (fun j => exp (lk j)))); [exact HK|].
        unfold Rdiv. rewrite Rmult_assoc, Rinv_l, Rmult_1_r, Rmult_1_l by lra.
        apply (Rmult_le_reg_l (/ exp G)); [apply Rinv_0_lt_compat, HEG|].
        rewrite <- Rmult_assoc, Rinv_l, Rmult_1_l by lra. lra. }
      nra. }
  assert (0 <= eform_A n lk c * exp G) by lra.
  assert (eform_A n lt (fun i => c i - g i) ^ 2 <= (eform_A n lk c * exp G) ^ 2) by nra.
  lra.
Qed.
